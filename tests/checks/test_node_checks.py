"""Every node check on fixture roots that make it pass and fail."""

from __future__ import annotations

from dataclasses import replace

import pytest

from halo_cluster.checks.context import NodeContext
from halo_cluster.checks.network import pcie_ceiling_gbps, roce_active_mtu
from halo_cluster.checks.platform import node_checks, recommended_gtt_mib
from halo_cluster.cluster.doctor import doctor_local
from halo_cluster.facts.inventory import collect_inventory
from tests.conftest import OUTPUTS, ROOTS


def severities(scenario: str, **kwargs: object) -> dict[str, str]:
    ctx = NodeContext(collect_inventory(str(ROOTS / scenario)), **kwargs)  # type: ignore[arg-type]
    return {f.check: f.severity for f in node_checks(ctx)}


def test_healthy_strix_passes() -> None:
    assert severities("strix-e810") == {
        "rdma.devices": "ok",
        "rdma.port_active": "ok",
        "rdma.roce_v2_gid": "ok",
        "rdma.active_mtu": "ok",
        "rdma.software_device": "ok",
        "rdma.userspace": "ok",
        "net.ifname": "ok",
        "net.address": "ok",
        "net.link_up": "ok",
        "net.mtu_jumbo": "ok",
        "pcie.link_degraded": "info",
        "nic.firmware": "info",
        "kernel.iommu": "ok",
        "kernel.pcie_aspm": "ok",
        "gpu.present": "ok",
        "dev.gpu_access": "ok",
        "amd.gtt_size": "ok",
        "amd.vram_carveout": "ok",
        "dev.infiniband": "ok",
        "limits.memlock": "ok",
        "firewall.trusted": "ok",
        "power.sources": "ok",
    }


def test_misconfigured_strix_fails_where_it_should() -> None:
    assert severities("strix-e810-misconfigured", fabric_address="192.168.100.2") == {
        "rdma.devices": "ok",
        "rdma.port_active": "ok",
        "rdma.roce_v2_gid": "ok",
        "rdma.active_mtu": "warn",
        "rdma.software_device": "ok",
        "rdma.userspace": "warn",
        "net.ifname": "ok",
        "net.address": "ok",
        "net.link_up": "ok",
        "net.mtu_jumbo": "warn",
        "pcie.link_degraded": "info",
        "nic.firmware": "info",
        "kernel.iommu": "warn",
        "kernel.pcie_aspm": "info",
        "gpu.present": "ok",
        "dev.gpu_access": "ok",
        "amd.gtt_size": "warn",
        "amd.vram_carveout": "warn",
        "dev.infiniband": "fail",
        "limits.memlock": "fail",
        "firewall.trusted": "warn",
        "power.sources": "ok",
    }


def test_fixes_follow_the_distribution() -> None:
    fedora = {
        f.check: f for f in doctor_local(str(ROOTS / "strix-e810-misconfigured")).all_findings()
    }
    assert fedora["kernel.iommu"].fix == (
        "sudo grubby --update-kernel=ALL --args=iommu=pt --remove-args=amd_iommu=off",
        "sudo reboot",
    )
    assert fedora["amd.gtt_size"].fix[0] == (
        "sudo grubby --update-kernel=ALL --args='amdgpu.gttsize=126976 ttm.pages_limit=32505856' "
        "--remove-args=amdgpu.gttsize=32768"
    )
    assert fedora["firewall.trusted"].fix == (
        "sudo firewall-cmd --permanent --zone=trusted --change-interface=enp194s0np0",
        "sudo firewall-cmd --reload",
    )
    assert (
        fedora["net.mtu_jumbo"].fix[0]
        == "sudo nmcli connection modify enp194s0np0 ethernet.mtu 9000"
    )
    ubuntu = {f.check: f for f in doctor_local(str(ROOTS / "connectx-roce")).all_findings()}
    assert ubuntu["firewall.trusted"].fix == ("sudo ufw allow in on ens1f0np0",)
    assert ubuntu["kernel.pcie_aspm"].fix[-2:] == ("sudo update-grub", "sudo reboot")


def test_power_sources_are_a_finding_of_their_own() -> None:
    found = {r: {f.check: f for f in doctor_local(str(ROOTS / r)).all_findings()}["power.sources"]
             for r in ("strix-e810", "no-rdma", "odd-content")}  # fmt: skip
    assert found["strix-e810"].summary == "amdgpu gpu power, amdgpu gpu power, rapl package-0 energy"
    assert found["no-rdma"].severity == "info" and "not measured" in found["no-rdma"].summary
    odd = found["odd-content"]
    assert odd.severity == "warn" and odd.summary.startswith("3 power reading(s) unreadable")
    assert odd.evidence[0].startswith("/sys/class/hwmon/hwmon1/power1_average")


def test_rdma_failures() -> None:
    port_down = NodeContext(collect_inventory(str(ROOTS / "port-down")), "roce", "10.22.115.221")
    found = {f.check: f for f in node_checks(port_down)}
    assert found["rdma.port_active"].severity == "fail"
    assert "irdma0/1: DOWN (Disabled)" in found["rdma.port_active"].evidence
    assert found["rdma.userspace"].severity == "fail"  # no libibverbs in that root
    assert severities("rxe-virtio")["rdma.software_device"] == "warn"
    assert severities("odd-content")["rdma.roce_v2_gid"] == "fail"
    assert severities("no-rdma", wanted="roce")["rdma.devices"] == "fail"
    assert severities("no-rdma")["rdma.devices"] == "warn"
    assert severities("thunderbolt", wanted="thunderbolt")["rdma.devices"] == "ok"


def test_missing_provider_fails() -> None:
    inv = collect_inventory(str(ROOTS / "strix-e810"))
    inv = replace(inv, rdma_core=replace(inv.rdma_core, providers=("mlx5",)))
    finding = next(f for f in node_checks(NodeContext(inv)) if f.check == "rdma.userspace")
    assert finding.severity == "fail" and "irdma" in finding.summary


def test_address_and_cpu_only_nodes() -> None:
    missing = severities("strix-e810", fabric_address="192.168.100.9")
    assert missing["net.address"] == "fail" and missing["net.link_up"] == "fail"
    cpu_only = severities("no-rdma", gpus=False)
    assert "gpu.present" not in cpu_only and "dev.gpu_access" not in cpu_only
    assert severities("no-rdma")["gpu.present"] == "fail"


def test_degraded_pcie_and_firmware() -> None:
    assert severities("odd-content")["pcie.link_degraded"] == "warn"  # x4 of x8, not an APU
    inv = collect_inventory(str(ROOTS / "strix-e810"))
    old = (OUTPUTS / "ethtool-i-ice-old.txt").read_text()
    new = (OUTPUTS / "ethtool-i-ice-4.91.txt").read_text()
    for text, want in ((old, "warn"), (new, "ok")):
        ctx = NodeContext(inv, ethtool={"enp194s0np0": text})
        assert next(f for f in node_checks(ctx) if f.check == "nic.firmware").severity == want


@pytest.mark.parametrize(
    ("speed", "width", "low", "high"), [(16.0, 4, 48, 52), (16.0, 16, 195, 205), (8.0, 1, 6, 7)]
)
def test_pcie_ceiling(speed: float, width: int, low: float, high: float) -> None:
    assert low <= pcie_ceiling_gbps(speed, width) <= high


def test_roce_mtu_and_gtt_arithmetic() -> None:
    assert [roce_active_mtu(m) for m in (1500, 4200, 4191, 9000)] == [1024, 4096, 2048, 4096]
    assert recommended_gtt_mib(130_511_264, 512 * 2**20) == 126976  # the reference 128 GB figure
    assert recommended_gtt_mib(65_512_448, 64 * 2**30) == 126976  # same box, 64 GiB carve-out
