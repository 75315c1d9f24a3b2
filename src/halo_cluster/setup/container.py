"""The command that creates the serving container with what this node really has (pure)."""

from __future__ import annotations

import os

from halo_cluster.facts.model import Inventory

ENGINES = ("podman", "docker", "toolbox", "distrobox")


def device_flags(inv: Inventory) -> list[str]:
    flags = []
    if inv.devices.dri:
        flags += ["--device", "/dev/dri"]
    if inv.devices.kfd:
        flags += ["--device", "/dev/kfd"]
    if inv.devices.infiniband:
        flags += ["--device", "/dev/infiniband"]
    return flags


def device_gids(root_path: str, inv: Inventory) -> list[str]:
    """Numeric groups of the GPU device nodes: a group *name* may not exist in the image."""
    gids = []
    for path in (*inv.devices.dri, "/dev/kfd" if inv.devices.kfd else ""):
        if not path:
            continue
        try:
            gid = str(os.stat(os.path.join(root_path, path.lstrip("/"))).st_gid)
        except OSError:
            continue
        if gid != "0" and gid not in gids:
            gids.append(gid)
    return gids


def container_argv(
    inv: Inventory, engine: str, image: str, name: str, gids: list[str]
) -> list[str]:
    common = [
        *device_flags(inv),
        "--ulimit",
        "memlock=-1",
        "--network",
        "host",
        "--ipc",
        "host",
        # ROCm's user-mode driver uses syscalls the default seccomp profile blocks
        "--security-opt",
        "seccomp=unconfined",
    ]
    if engine == "toolbox":
        # toolbox shares the host's /dev, network, IPC and limits with the container.
        return ["toolbox", "create", "--image", image, name]
    if engine == "distrobox":
        return [
            "distrobox",
            "create",
            "--name",
            name,
            "--image",
            image,
            "--additional-flags",
            " ".join(flag for flag in common),
        ]
    groups = (
        ["--group-add", "keep-groups"]
        if engine == "podman"
        else [arg for gid in gids for arg in ("--group-add", gid)]
    )
    return [engine, "run", "-d", "--name", name, *common, *groups, image, "sleep", "infinity"]
