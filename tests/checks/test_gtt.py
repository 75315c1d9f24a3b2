"""The GTT and TTM settings (issue 47, item 8): the kernel command line's values against each
other and against what the running kernel holds, and the doctor's finding and fix."""

from __future__ import annotations

from dataclasses import replace

import pytest

from halo_cluster.checks.context import NodeContext
from halo_cluster.checks.platform import check_gtt, gtt_args, gtt_disagreement, gtt_not_applied
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.model import AmdMemory
from tests.conftest import ROOTS

REFERENCE = AmdMemory(126976, 32505856, 0)  # 124 GiB of GTT on a 128 GB box, TTM's own pool


def test_the_command_line_is_read_for_the_last_value_of_each() -> None:
    args = ["ro", "amdgpu.gttsize=32768", "quiet", "ttm.pages_limit=x", "amdgpu.gttsize=126976"]
    assert gtt_args(args) == {"amdgpu.gttsize": 126976, "ttm.pages_limit": None}
    assert gtt_args(["ro", "quiet", "ttm.pages_limit_x=1"]) == {}


@pytest.mark.parametrize(
    ("cmdline", "problem"),
    [
        ("amdgpu.gttsize=126976 ttm.pages_limit=32505856", None),
        ("ttm.pages_limit=32505856", None),  # gttsize is deprecated: TTM's limit is enough
        ("", None),
        (
            "amdgpu.gttsize=126976 ttm.pages_limit=8388608",
            "amdgpu.gttsize=126976 (124 GiB) and ttm.pages_limit=8388608 (32 GiB) disagree",
        ),
        (
            "ttm.pages_limit=32505856 ttm.page_pool_size=8388608",
            "ttm.page_pool_size=8388608 differs from ttm.pages_limit=32505856",
        ),
        ("ttm.pages_limit=lots", "ttm.pages_limit on the kernel command line is not"),
    ],
)
def test_settings_that_disagree_are_named(cmdline: str, problem: str | None) -> None:
    found = gtt_disagreement(gtt_args(cmdline.split()))
    assert (found if problem is None else (found or "")[: len(problem)]) == problem


def test_a_setting_the_running_kernel_does_not_hold_is_named() -> None:
    args = gtt_args(["amdgpu.gttsize=126976", "ttm.pages_limit=32505856"])
    assert gtt_not_applied(args, REFERENCE) is None
    assert gtt_not_applied(args, AmdMemory(None, None)) is None  # unreadable: nothing said
    assert gtt_not_applied(args, AmdMemory(126976, 16777216)) == (
        "the running kernel holds ttm.pages_limit=16777216, the command line asks 32505856: "
        "a modprobe.d file or an old initramfs overrides it, or it waits for a reboot"
    )


def test_the_doctor_warns_with_the_fix_that_sets_them_together() -> None:
    inv = collect_inventory(str(ROOTS / "strix-e810"))
    assert check_gtt(NodeContext(inv)).severity == "ok"
    cmdline = (inv.kernel.cmdline or "") + " ttm.page_pool_size=8388608"
    odd = replace(inv, kernel=replace(inv.kernel, cmdline=cmdline))
    found = check_gtt(NodeContext(odd))
    assert found.severity == "warn" and "ttm.page_pool_size=8388608 differs" in found.summary
    assert found.fix[0] == (
        "sudo grubby --update-kernel=ALL --args='amdgpu.gttsize=126976 ttm.pages_limit=32505856 "
        "ttm.page_pool_size=32505856' --remove-args='amdgpu.gttsize=126976 "
        "ttm.pages_limit=32505856 ttm.page_pool_size=8388608'"
    )
    # a limit the running kernel does not hold: overridden, or waiting for a reboot
    held = check_gtt(NodeContext(replace(inv, amd_memory=AmdMemory(126976, 16777216, 0))))
    assert held.summary.startswith("the running kernel holds ttm.pages_limit=16777216")
    assert held.fix[1:] == ("sudo dracut --force", "sudo reboot")
