"""halo setup: golden steps for every root and distro, GRUB editing, apply and verify."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from halo_cluster.errors import ParseError, SetupError
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.result import Result
from halo_cluster.setup.apply import apply_steps, current_steps
from halo_cluster.setup.container import container_argv
from halo_cluster.setup.grub import edit_grub, grub_args
from halo_cluster.setup.steps import MEMLOCK_FILE, MEMLOCK_TEXT, SetupOptions, kernel_args
from tests.conftest import EXPECTED, OUTPUTS, ROOTS, SCENARIOS

GOLDEN = EXPECTED / "setup"


@pytest.mark.parametrize("distro", ["auto", "fedora", "ubuntu"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_steps_match_golden(scenario: str, distro: str) -> None:
    steps = current_steps(str(ROOTS / scenario), SetupOptions(distro=distro, home="root"))
    assert [s.to_dict() for s in steps] == json.loads(
        (GOLDEN / f"{scenario}.{distro}.json").read_text()
    )


def test_healthy_node_has_nothing_to_do() -> None:
    assert all(s.done for s in current_steps(str(ROOTS / "strix-e810"), SetupOptions(home="root")))


def test_gtt_is_computed_from_memory_not_fixed() -> None:
    steps = {
        s.id: s
        for s in current_steps(str(ROOTS / "strix-e810-misconfigured"), SetupOptions(home="root"))
    }
    command = steps["kernel"].to_dict()["commands"][0]
    assert "amdgpu.gttsize=126976 ttm.pages_limit=32505856" in command
    assert "--remove-args=amd_iommu=off amdgpu.gttsize=32768" in command


def test_a_page_pool_on_the_command_line_follows_the_limit() -> None:
    inv = collect_inventory(str(ROOTS / "strix-e810"))
    assert kernel_args(inv)[0][-1] == "ttm.pages_limit=32505856"  # none set: none added
    pooled = (inv.kernel.cmdline or "") + " ttm.page_pool_size=8388608"
    add, _ = kernel_args(replace(inv, kernel=replace(inv.kernel, cmdline=pooled)))
    assert add[-2:] == ["ttm.pages_limit=32505856", "ttm.page_pool_size=32505856"]


def test_grub_edit_fedora_layout() -> None:
    text = (OUTPUTS / "grub" / "fedora-43").read_text()
    edited = edit_grub(text, ["iommu=pt", "amdgpu.gttsize=126976"], ["amd_iommu=off"])
    assert (
        'GRUB_CMDLINE_LINUX="rootflags=subvol=root rhgb quiet iommu=pt amdgpu.gttsize=126976"\n'
        in edited
    )
    assert [a for a, b in zip(text.splitlines(), edited.splitlines(), strict=True) if a != b] == [
        'GRUB_CMDLINE_LINUX="rootflags=subvol=root rhgb quiet amd_iommu=off amdgpu.gttsize=32768"'
    ]
    assert (
        edit_grub(edited, ["iommu=pt", "amdgpu.gttsize=126976"], ["amd_iommu=off"]) == edited
    )  # idempotent


def test_grub_edit_ubuntu_layout() -> None:
    text = (OUTPUTS / "grub" / "ubuntu-24.04").read_text()
    edited = edit_grub(text, ["iommu=pt", "pcie_aspm=off"], [])
    assert grub_args(edited) == ["quiet", "splash", "iommu=pt", "pcie_aspm=off"]
    assert 'GRUB_CMDLINE_LINUX=""' in edited and "GRUB_DISTRIBUTOR=`( . /etc/os-release" in edited
    assert len(edited.splitlines()) == len(text.splitlines())


def test_grub_edit_refuses_shell_expansion() -> None:
    with pytest.raises(ParseError):
        edit_grub('GRUB_CMDLINE_LINUX_DEFAULT="quiet $extra"\n', ["iommu=pt"], [])


def copy_root(tmp_path: Path, scenario: str) -> str:
    target = tmp_path / scenario
    shutil.copytree(ROOTS / scenario, target, symlinks=True)
    return str(target)


def test_apply_file_steps_then_nothing_changes(tmp_path: Path) -> None:
    root = copy_root(tmp_path, "connectx-roce")
    runner = FakeRunner().on(["update-grub"], Result((), 0, "", ""))
    outcomes = apply_steps(root, SetupOptions(home="root"), runner, only={"kernel", "memlock"})
    assert [(o.step, o.changed) for o in outcomes] == [("kernel", True), ("memlock", False)]
    assert grub_args(Path(root, "etc/default/grub").read_text()) == [
        "quiet",
        "splash",
        "iommu=pt",
        "pcie_aspm=off",
    ]
    assert runner.calls == [("update-grub",)]
    again = apply_steps(root, SetupOptions(home="root"), runner, only={"kernel", "memlock"})
    assert [o.changed for o in again] == [False, False] and runner.calls == [("update-grub",)]


def test_memlock_file_written_and_verified(tmp_path: Path) -> None:
    root = copy_root(tmp_path, "rxe-virtio")
    outcomes = apply_steps(root, SetupOptions(home="root"), FakeRunner(), only={"memlock"})
    assert outcomes[0].changed
    assert Path(root, MEMLOCK_FILE).read_text() == MEMLOCK_TEXT
    assert oct(os.stat(Path(root, MEMLOCK_FILE)).st_mode & 0o777) == "0o644"


def test_failing_step_stops_with_its_error(tmp_path: Path) -> None:
    root = copy_root(tmp_path, "strix-e810-misconfigured")
    runner = FakeRunner().on(["firewall-cmd"], Result((), 252, "", "FirewallD is not running"))
    with pytest.raises(
        SetupError, match=r"firewall-cmd --permanent --zone=trusted .* FirewallD is not running"
    ):
        apply_steps(root, SetupOptions(home="root"), runner, only={"firewall", "memlock"})
    assert not Path(root, MEMLOCK_FILE).exists()  # the run stopped before memlock


def test_step_that_does_not_take_effect_is_a_failure(tmp_path: Path) -> None:
    root = copy_root(tmp_path, "strix-e810-misconfigured")
    runner = FakeRunner().on(["firewall-cmd"], Result((), 0, "success", ""))
    with pytest.raises(SetupError, match="step firewall ran but is still not done"):
        apply_steps(root, SetupOptions(home="root"), runner, only={"firewall"})


def test_container_commands() -> None:
    inv = collect_inventory(str(ROOTS / "strix-e810"))
    podman = container_argv(inv, "podman", "img", "vllm", [])
    assert podman == [
        "podman",
        "run",
        "-d",
        "--name",
        "vllm",
        "--device",
        "/dev/dri",
        "--device",
        "/dev/kfd",
        "--device",
        "/dev/infiniband",
        "--ulimit",
        "memlock=-1",
        "--network",
        "host",
        "--ipc",
        "host",
        "--security-opt",
        "seccomp=unconfined",
        "--group-add",
        "keep-groups",
        "img",
        "sleep",
        "infinity",
    ]
    docker = container_argv(inv, "docker", "img", "vllm", ["105", "44"])
    assert "keep-groups" not in docker and docker[docker.index("--group-add") + 1] == "105"
    bad = collect_inventory(str(ROOTS / "strix-e810-misconfigured"))
    assert "/dev/infiniband" not in container_argv(bad, "podman", "img", "vllm", [])
    assert container_argv(inv, "toolbox", "img", "vllm", []) == [
        "toolbox",
        "create",
        "--image",
        "img",
        "vllm",
    ]
    distrobox = container_argv(inv, "distrobox", "img", "vllm", [])
    assert distrobox[:6] == ["distrobox", "create", "--name", "vllm", "--image", "img"]
    assert "--device /dev/infiniband --ulimit memlock=-1" in distrobox[-1]
