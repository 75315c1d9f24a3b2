"""Interface names NCCL and Gloo cannot be given (a name that is not UTF-8 read from
/sys/class/net and /proc/net, one too long, one with '/' or a control character): one name
for it across the node's files, a doctor finding, and a transport plan that refuses it
instead of moving NCCL and Gloo to the management interface."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.checks.context import NodeContext
from halo_cluster.checks.network import check_ifnames
from halo_cluster.errors import TransportError
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.netnames import (
    bind_host_problem,
    ifname_problem,
    interface_address_problem,
    node_address_problem,
)
from halo_cluster.transport import plan_transport

BAD = "fab\ufffd0"  # how halo reads the name b"fab\xff0"


def rename_interface(root: Path, old: bytes, new: bytes) -> None:
    """Rename a netdev everywhere in a fixture root: its sysfs entries and every file that
    names it (/proc/net tables, GID attributes, firewalld zones)."""
    top = os.fsencode(root)
    for folder, _dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                continue
            with open(path, "rb") as handle:
                data = handle.read()
            if old in data:
                with open(path, "wb") as handle:
                    handle.write(data.replace(old, new))
    for folder, _dirs, _files in os.walk(top, topdown=False):  # children before parents
        for entry in os.listdir(folder):
            if entry != old:
                continue
            path = os.path.join(folder, entry)
            if os.path.islink(path):
                target = os.readlink(path)
                os.remove(path)
                os.symlink(target.replace(old, new), os.path.join(folder, new))
            else:
                os.rename(path, os.path.join(folder, new))


@pytest.fixture
def non_utf8_root(root_copy) -> Path:  # type: ignore[no-untyped-def]
    root: Path = root_copy("strix-e810")
    rename_interface(root, b"enp194s0np0", b"fab\xff0")
    return root


def test_one_name_across_sysfs_and_proc(non_utf8_root: Path) -> None:
    """Listed from /sys/class/net and read from /proc/net/route, the name is one string, so
    the interface keeps its address and the RDMA port its netdev."""
    inv = collect_inventory(str(non_utf8_root))
    fabric = inv.interface(BAD)
    assert fabric is not None and fabric.ipv4 == ("192.168.100.1/30",)
    assert inv.rdma[0].ports[0].netdev == BAD


def test_the_plan_refuses_it_instead_of_moving_to_the_management_nic(
    non_utf8_root: Path,
) -> None:
    inv = collect_inventory(str(non_utf8_root))
    for wanted in ("auto", "roce"):
        with pytest.raises(TransportError) as err:
            plan_transport(inv, wanted)
        assert str(err.value) == (
            "rocep194s0/1: interface 'fab\ufffd0' is not UTF-8, so NCCL and Gloo cannot be "
            "pointed at it: give it a plain name (a systemd .link file or a udev rule renames it)"
        )
    with pytest.raises(TransportError) as err:
        plan_transport(inv, "ethernet", "192.168.100.2")
    assert str(err.value).startswith("the interface on peer 192.168.100.2's network: interface ")
    plan = plan_transport(inv, "ethernet")  # no peer: the other interface, said so
    assert plan.env["NCCL_SOCKET_IFNAME"] == "=enp191s0"
    assert plan.warnings == (
        "skipped 'fab\ufffd0': not a name NCCL and Gloo can be given (see doctor)",
    )


def test_doctor_names_it(non_utf8_root: Path) -> None:
    finding = check_ifnames(NodeContext(collect_inventory(str(non_utf8_root))))
    assert finding.to_dict() == {
        "check": "net.ifname",
        "severity": "fail",
        "summary": "interface 'fab\ufffd0' is not UTF-8: NCCL and Gloo cannot be pointed at it",
        "evidence": [],
        "fix": [
            "# give it a plain name (at most 15 ASCII letters, digits, '-', '_', '.'): a "
            "systemd .link file ([Match] MACAddress=..., [Link] Name=fabric0) or a udev rule, "
            "then reboot"
        ],
    }


def test_a_negative_mtu_is_a_warning_not_a_size(root_copy) -> None:  # type: ignore[no-untyped-def]
    root = root_copy("strix-e810")
    (root / "sys/devices/pci0000:00/0000:00:02.1/0000:c2:00.0/net/enp194s0np0/mtu").write_text(
        "-1\n"
    )
    inv = collect_inventory(str(root))
    assert inv.interface("enp194s0np0").mtu is None  # type: ignore[union-attr]
    assert (
        "/sys/class/net/enp194s0np0/mtu: an MTU outside 0-2147483647 (content '-1\\n')"
        in inv.warnings
    )


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("enp194s0np0", None),
        ("eth0.100", None),
        ("a" * 15, None),
        ("a" * 16, "is longer than 15 bytes"),
        ("ééééééééé", "is longer than 15 bytes"),  # 18 bytes
        (BAD, "is not UTF-8"),
        ("fab\udcff0", "is not UTF-8"),
        ("", "is empty"),
        (".", "is '.' or '..'"),
        ("..", "is '.' or '..'"),
        ("a/b", "holds '/', ':', ',' or whitespace"),
        ("eth0:1", "holds '/', ':', ',' or whitespace"),
        ("a,b", "holds '/', ':', ',' or whitespace"),
        ("a b", "holds '/', ':', ',' or whitespace"),
        ("a\u00a0b", "holds '/', ':', ',' or whitespace"),
        ("a\x1bb", "holds a control character"),
        ("a\u202eb", "holds a control character"),
        ("^eth0", "starts with '^' or '=' (NCCL_SOCKET_IFNAME's own prefixes)"),
        ("=eth0", "starts with '^' or '=' (NCCL_SOCKET_IFNAME's own prefixes)"),
    ],
)
def test_ifname_problem(name: str, problem: str | None) -> None:
    assert ifname_problem(name) == problem


def test_address_problems() -> None:
    own = "give the node's own address"
    assert [node_address_problem(a) for a in ("10.0.0.1", "127.0.0.1", "169.254.1.1")] == [None] * 3
    assert node_address_problem("0.0.0.0") == f"is 0.0.0.0 (every interface): {own}"
    assert node_address_problem("239.1.1.1") == f"is a multicast address: {own}"
    assert node_address_problem("250.0.0.1") == f"is a reserved address (240.0.0.0/4): {own}"
    assert node_address_problem("10.0.0.1/30") == "is not an IPv4 address"
    assert interface_address_problem("192.168.100.1/30") is None
    assert interface_address_problem("10.0.0.0/31") is None  # point-to-point: both usable
    assert interface_address_problem("0.0.0.0/30") == f"is 0.0.0.0 (every interface): {own}"
    assert interface_address_problem("192.168.100.3/30") == (
        "is the network or broadcast address of 192.168.100.0/30"
    )
    for bad in (
        "192.168.100.1",
        "192.168.100.1/33",
        "192.168.100.1/x",
        "192.168.100.1/²",
        "192.168.100.1/0",
        "192.168.100.1/030",
        "192.168.100.1/" + "3" * 5000,
    ):
        assert interface_address_problem(bad) == "needs a prefix length, e.g. 192.168.100.1/30"


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "0.0.0.0", "::", "::1", "fe80::1%eth0", "localhost", "head.lab."]
)
def test_hosts_to_bind(host: str) -> None:
    assert bind_host_problem(host) is None


@pytest.mark.parametrize(
    "host", ["", "a" * 254, "x_y", "a..b", "-x", "x-", "h\u202e", "é.com", "fe80::1%a b", "a\n"]
)
def test_not_hosts_to_bind(host: str) -> None:
    assert bind_host_problem(host) is not None


@given(st.text())
def test_the_judges_never_raise(text: str) -> None:
    for judge in (ifname_problem, node_address_problem, interface_address_problem):
        assert judge(text) is None or isinstance(judge(text), str)
    assert bind_host_problem(text) is None or isinstance(bind_host_problem(text), str)
