"""What a lab node's init mounts: its private /tmp with the host paths it still needs bound
back, read-only engine builds, and (bare nodes) halo's own environment hidden."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from halo_cluster.lab.state import LabState


def keep_paths(state: LabState) -> list[str]:
    """Host paths under /tmp that nodes still need behind their private /tmp: the lab
    directory (keys, configs), halo's own installation and the engine environment."""
    import halo_cluster

    wanted = {state.dir, sys.prefix, str(Path(halo_cluster.__file__).resolve().parents[1])}
    wanted |= {path for path in (state.engine, state.llama_cpp) if path}
    under_tmp = sorted(
        os.path.realpath(p) for p in wanted if os.path.realpath(p).startswith("/tmp/")
    )
    kept: list[str] = []
    for path in under_tmp:
        if not any(path.startswith(k + "/") for k in kept):
            kept.append(path)
    return kept


def private_tmp_script(kept: list[str]) -> str:
    """A fresh /tmp, with the kept host paths bound back at their own places."""
    lines = []
    for i, path in enumerate(kept):
        lines += [
            f"mkdir -p /run/halo-keep/{i}",
            f"mount --rbind {shlex.quote(path)} /run/halo-keep/{i}",
        ]
    lines.append("mount -t tmpfs -o mode=1777 tmpfs /tmp")
    for i, path in enumerate(kept):
        lines += [
            f"mkdir -p {shlex.quote(path)}",
            f"mount --rbind /run/halo-keep/{i} {shlex.quote(path)}",
        ]
    return "".join(line + "\n" for line in lines)


def read_only_script(path: str | None) -> str:
    """Bind ``path`` onto itself read-only, inside the node's own mount namespace."""
    if path is None:
        return ""
    quoted = shlex.quote(path)
    return f"mount --bind {quoted} {quoted}\nmount -o remount,bind,ro {quoted} {quoted}\n"


def hidden_script(path: str | None) -> str:
    """An empty read-only directory over ``path`` inside the node (bare nodes: halo's own
    environment is not there, as on a machine where only the controller has halo)."""
    if path is None:
        return ""
    quoted = shlex.quote(os.path.realpath(path))
    return f"mount -t tmpfs -o ro,mode=755,size=4k tmpfs {quoted}\n"


def store_script(host_dir: str, inside: str) -> str:
    """The node's own model store: its host directory bound at ``inside``, then the
    directory of every node's stores hidden (an empty read-only tmpfs over it), so a node
    sees only its own disk, as a separate machine would."""
    quoted, target = shlex.quote(host_dir), shlex.quote(inside)
    stores = shlex.quote(os.path.dirname(os.path.realpath(host_dir)))
    return (
        f"mkdir -p {target}\n"
        f"mount --bind {quoted} {target}\n"
        f"mount -t tmpfs -o ro,mode=755,size=4k tmpfs {stores}\n"
    )
