"""setup/fabric.py: a node's steps of a routed fabric, on filesystem roots built here as the
node's kernel shows them (/proc/net/fib_trie and /proc/net/route captured from a network
namespace with the same cables, addresses and routes: veths for the cables, a bridge for
the identity), each step complete: done, the exact commands, the note."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.model import Inventory
from halo_cluster.facts.root import Root
from halo_cluster.mesh import NodeFabric, build_fabric
from halo_cluster.setup.fabric import (
    FABRIC_STEP_IDS,
    FORWARD_FILE,
    FORWARD_TEXT,
    FRR_DAEMONS,
    FRR_DAEMONS_TEXT,
    FRR_FILE,
    NOT_PERSISTENT,
    enable_fabricd,
    fabric_steps,
    frr_config,
    missing_routes,
)
from halo_cluster.setup.step import Action, Step
from halo_cluster.setup.steps import SetupOptions, setup_steps
from tests.conftest import ROOTS

RELEASE = "6.17.7-300.fc43.x86_64"
NAMES = ["node1", "node2", "node3"]
MESH_CABLING = {
    "node1": [("thunderbolt0", "node2"), ("thunderbolt1", "node3")],
    "node2": [("thunderbolt0", "node1"), ("thunderbolt1", "node3")],
    "node3": [("thunderbolt0", "node1"), ("thunderbolt1", "node2")],
}
# node1 in the middle: node2 - node1 - node3 (its cables are the mesh's, so are its /31s)
LINE_CABLING = {
    "node1": [("thunderbolt0", "node2"), ("thunderbolt1", "node3")],
    "node2": [("thunderbolt0", "node1")],
    "node3": [("thunderbolt0", "node1")],
}
IDENTITIES = {name: f"10.0.0.{i}" for i, name in enumerate(NAMES, 1)}
MESH = build_fabric(IDENTITIES, MESH_CABLING).node("node1")
LINE = build_fabric(IDENTITIES, LINE_CABLING).node("node1")
OPENFABRIC = build_fabric(IDENTITIES, MESH_CABLING, routing="openfabric").node("node1")

# /proc/net/fib_trie of a node with only its management address (eth0 192.168.1.23/24)
FIB_BARE = """\
Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     +-- 192.168.1.0/24 2 0 2
        +-- 192.168.1.0/27 2 0 2
           |-- 192.168.1.0
              /24 link UNICAST
           |-- 192.168.1.23
              /32 host LOCAL
        |-- 192.168.1.255
           /32 link BROADCAST
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     +-- 192.168.1.0/24 2 0 2
        +-- 192.168.1.0/27 2 0 2
           |-- 192.168.1.0
              /24 link UNICAST
           |-- 192.168.1.23
              /32 host LOCAL
        |-- 192.168.1.255
           /32 link BROADCAST
"""

# the same node with node1's part of the mesh applied: the /31s on thunderbolt0 and 1, the
# identity 10.0.0.1/32 on halo0, the routes to 10.0.0.2, 10.0.0.3 and 10.254.0.4/31
FIB_DONE = """\
Main:
  +-- 0.0.0.0/0 3 0 5
     +-- 0.0.0.0/4 2 0 2
        |-- 0.0.0.0
           /0 universe UNICAST
        +-- 10.0.0.0/8 2 0 2
           +-- 10.0.0.0/30 2 0 1
              |-- 10.0.0.1
                 /32 host LOCAL
              |-- 10.0.0.2
                 /32 universe UNICAST
              |-- 10.0.0.3
                 /32 universe UNICAST
           +-- 10.254.0.0/29 2 0 1
              |-- 10.254.0.0
                 /32 host LOCAL
                 /31 link UNICAST
              |-- 10.254.0.2
                 /32 host LOCAL
                 /31 link UNICAST
              |-- 10.254.0.4
                 /31 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     +-- 192.168.1.0/24 2 0 2
        +-- 192.168.1.0/27 2 0 2
           |-- 192.168.1.0
              /24 link UNICAST
           |-- 192.168.1.23
              /32 host LOCAL
        |-- 192.168.1.255
           /32 link BROADCAST
Local:
  +-- 0.0.0.0/0 3 0 5
     +-- 0.0.0.0/4 2 0 2
        |-- 0.0.0.0
           /0 universe UNICAST
        +-- 10.0.0.0/8 2 0 2
           +-- 10.0.0.0/30 2 0 1
              |-- 10.0.0.1
                 /32 host LOCAL
              |-- 10.0.0.2
                 /32 universe UNICAST
              |-- 10.0.0.3
                 /32 universe UNICAST
           +-- 10.254.0.0/29 2 0 1
              |-- 10.254.0.0
                 /32 host LOCAL
                 /31 link UNICAST
              |-- 10.254.0.2
                 /32 host LOCAL
                 /31 link UNICAST
              |-- 10.254.0.4
                 /31 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     +-- 192.168.1.0/24 2 0 2
        +-- 192.168.1.0/27 2 0 2
           |-- 192.168.1.0
              /24 link UNICAST
           |-- 192.168.1.23
              /32 host LOCAL
        |-- 192.168.1.255
           /32 link BROADCAST
"""

# /proc/net/route's header and rows, each padded to 127 characters as the kernel does
ROUTE_HEADER = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"
DEFAULT = "eth0\t00000000\t0101A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0"
MGMT = "eth0\t0001A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0"
TB0_31 = "thunderbolt0\t0000FE0A\t00000000\t0001\t0\t0\t0\tFEFFFFFF\t0\t0\t0"
TB1_31 = "thunderbolt1\t0200FE0A\t00000000\t0001\t0\t0\t0\tFEFFFFFF\t0\t0\t0"
TO_NODE2 = "thunderbolt0\t0200000A\t0100FE0A\t0007\t0\t0\t0\tFFFFFFFF\t0\t0\t0"
TO_NODE3 = "thunderbolt1\t0300000A\t0300FE0A\t0007\t0\t0\t0\tFFFFFFFF\t0\t0\t0"
TO_NODE3_OVER_TB0 = "thunderbolt0\t0300000A\t0100FE0A\t0007\t0\t0\t0\tFFFFFFFF\t0\t0\t0"
TO_CABLE23 = "thunderbolt0\t0400FE0A\t0100FE0A\t0003\t0\t0\t0\tFEFFFFFF\t0\t0\t0"
ROUTES_BARE = [DEFAULT, MGMT]
ROUTES_DONE = [DEFAULT, TO_NODE2, TO_NODE3, TB0_31, TB1_31, TO_CABLE23, MGMT]


def route_text(rows: list[str]) -> str:
    return "".join(f"{row:<127}\n" for row in [ROUTE_HEADER, *rows])


def le_hex(address: str) -> str:
    return socket.inet_aton(address)[::-1].hex().upper()


def test_route_rows_are_the_kernels_encoding() -> None:
    assert (le_hex("10.0.0.2"), le_hex("10.254.0.1"), le_hex("255.255.255.254")) == (
        "0200000A",
        "0100FE0A",
        "FEFFFFFF",
    )


def node_root(
    tmp_path: Path,
    interfaces: dict[str, tuple[int, str]],
    fib_trie: str = FIB_BARE,
    routes: list[str] | None = None,
    forward: str | None = "0\n",
    dummy: str = "module",
    release: str | None = RELEASE,
) -> str:
    """A node's root: ``interfaces`` (name -> MTU, operstate), its fib_trie and routes,
    ip_forward, and the dummy driver (``loaded``, ``builtin``, ``module`` on disk, or
    ``none``)."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    shutil.copy(ROOTS / "thunderbolt" / "etc" / "os-release", root / "etc" / "os-release")
    files = {
        "proc/net/fib_trie": fib_trie,
        "proc/net/route": route_text(ROUTES_BARE if routes is None else routes),
    }
    if release is not None:
        files["proc/sys/kernel/osrelease"] = release + "\n"
    if forward is not None:
        files["proc/sys/net/ipv4/ip_forward"] = forward
    for name, (mtu, state) in interfaces.items():
        base = f"sys/devices/virtual/net/{name}"
        files |= {f"{base}/mtu": f"{mtu}\n", f"{base}/operstate": f"{state}\n"}
        files[f"{base}/type"] = "1\n"
    if dummy == "module":
        files[f"lib/modules/{RELEASE}/modules.dep"] = (
            "kernel/drivers/net/veth.ko.xz:\nkernel/drivers/net/dummy.ko.xz:\n"
        )
    elif dummy == "builtin":
        files[f"lib/modules/{RELEASE}/modules.builtin"] = "kernel/drivers/net/dummy.ko\n"
    else:
        files[f"lib/modules/{RELEASE}/modules.dep"] = "kernel/drivers/net/veth.ko.xz:\n"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    if dummy == "loaded":
        (root / "sys/module/dummy").mkdir(parents=True)
    (root / "sys/class/net").mkdir(parents=True)
    for name in interfaces:
        (root / "sys/class/net" / name).symlink_to(f"../../devices/virtual/net/{name}")
    return str(root)


def steps_of(root: str, part: NodeFabric) -> list[Step]:
    return fabric_steps(Root(root), collect_inventory(root), part)


BARE_IFACES = {"eth0": (1500, "up"), "thunderbolt0": (1500, "down"), "thunderbolt1": (1500, "down")}
DONE_IFACES = {
    "eth0": (1500, "up"),
    "thunderbolt0": (9000, "up"),
    "thunderbolt1": (9000, "up"),
    "halo0": (1500, "unknown"),
}


def test_the_roots_read_as_the_node_sees_itself(tmp_path: Path) -> None:
    inv = collect_inventory(node_root(tmp_path, DONE_IFACES, FIB_DONE, ROUTES_DONE))
    assert {i.name: (i.kind, i.mtu, i.state, i.ipv4) for i in inv.net} == {
        "eth0": ("virtual", 1500, "up", ("192.168.1.23/24",)),
        "thunderbolt0": ("thunderbolt", 9000, "up", ("10.254.0.0/31",)),
        "thunderbolt1": ("thunderbolt", 9000, "up", ("10.254.0.2/31",)),
        # a /32 has no prefix route: the inventory cannot place it (the setup reads
        # fib_trie for it)
        "halo0": ("virtual", 1500, "unknown", ()),
    }
    assert inv.kernel.release == RELEASE


LINKS_TITLE = (
    "cables: thunderbolt0 10.254.0.0/31 to node2, thunderbolt1 10.254.0.2/31 to node3, MTU 9000"
)
LINKS_DONE = Step("fabric_links", LINKS_TITLE, True, (), check="fabric.link", note="")
IDENTITY_TITLE = "identity 10.0.0.1/32 on halo0"
IDENTITY_DONE = Step("fabric_identity", IDENTITY_TITLE, True, (), check="fabric.identity")
ROUTES_TITLE = "routes to 3 identities and cables (static)"
ROUTES_STEP_DONE = Step("fabric_routes", ROUTES_TITLE, True, (), check="fabric.reach")
FORWARDING_TITLE = "forwarding between the fabric links"
NOT_NEEDED = Step(
    "fabric_forwarding",
    FORWARDING_TITLE,
    True,
    (),
    check="fabric.forwarding",
    note="not needed: no chosen path crosses this node",
)
STATIC_ROUTES = (
    Action(
        (
            "ip", "route", "replace", "10.0.0.2/32", "via", "10.254.0.1",
            "dev", "thunderbolt0", "src", "10.0.0.1",
        )
    ),
    Action(
        (
            "ip", "route", "replace", "10.0.0.3/32", "via", "10.254.0.3",
            "dev", "thunderbolt1", "src", "10.0.0.1",
        )
    ),
    Action(
        (
            "ip", "route", "replace", "10.254.0.4/31", "via", "10.254.0.1",
            "dev", "thunderbolt0", "src", "10.0.0.1",
        )
    ),
)  # fmt: skip


def test_nothing_set_up_lists_every_action(tmp_path: Path) -> None:
    root = node_root(tmp_path, BARE_IFACES)
    assert steps_of(root, MESH) == [
        Step(
            "fabric_links",
            LINKS_TITLE,
            False,
            (
                Action(("ip", "link", "set", "dev", "thunderbolt0", "mtu", "9000", "up")),
                Action(("ip", "addr", "replace", "10.254.0.0/31", "dev", "thunderbolt0")),
                Action(("ip", "link", "set", "dev", "thunderbolt1", "mtu", "9000", "up")),
                Action(("ip", "addr", "replace", "10.254.0.2/31", "dev", "thunderbolt1")),
            ),
            check="fabric.link",
            note=NOT_PERSISTENT,
        ),
        Step(
            "fabric_identity",
            IDENTITY_TITLE,
            False,
            (
                Action(("ip", "link", "add", "halo0", "type", "dummy")),
                Action(("ip", "link", "set", "dev", "halo0", "up")),
                Action(("ip", "addr", "replace", "10.0.0.1/32", "dev", "halo0")),
            ),
            check="fabric.identity",
            note=NOT_PERSISTENT,
        ),
        Step(
            "fabric_routes",
            ROUTES_TITLE,
            False,
            STATIC_ROUTES,
            check="fabric.reach",
            note="3 missing; " + NOT_PERSISTENT,
        ),
        NOT_NEEDED,
    ]
    assert (
        NOT_PERSISTENT
        == "via ip: not kept across a reboot (run halo setup --apply again after one)"
    )


def test_nothing_set_up_as_json(tmp_path: Path) -> None:
    root = node_root(tmp_path, BARE_IFACES)
    assert [s.to_dict() for s in steps_of(root, MESH)][1:3] == [
        {
            "id": "fabric_identity",
            "title": "identity 10.0.0.1/32 on halo0",
            "done": False,
            "commands": [
                "sudo ip link add halo0 type dummy",
                "sudo ip link set dev halo0 up",
                "sudo ip addr replace 10.0.0.1/32 dev halo0",
            ],
            "reboot": False,
            "check": "fabric.identity",
            "note": NOT_PERSISTENT,
        },
        {
            "id": "fabric_routes",
            "title": "routes to 3 identities and cables (static)",
            "done": False,
            "commands": [
                "sudo ip route replace 10.0.0.2/32 via 10.254.0.1 dev thunderbolt0 src 10.0.0.1",
                "sudo ip route replace 10.0.0.3/32 via 10.254.0.3 dev thunderbolt1 src 10.0.0.1",
                "sudo ip route replace 10.254.0.4/31 via 10.254.0.1 dev thunderbolt0 src 10.0.0.1",
            ],
            "reboot": False,
            "check": "fabric.reach",
            "note": "3 missing; " + NOT_PERSISTENT,
        },
    ]


def test_all_done(tmp_path: Path) -> None:
    root = node_root(tmp_path, DONE_IFACES, FIB_DONE, ROUTES_DONE)
    assert steps_of(root, MESH) == [LINKS_DONE, IDENTITY_DONE, ROUTES_STEP_DONE, NOT_NEEDED]
    assert [s.id for s in steps_of(root, MESH)] == list(FABRIC_STEP_IDS)


def test_a_route_over_another_cable_is_replaced(tmp_path: Path) -> None:
    routes = [DEFAULT, TO_NODE2, TO_NODE3_OVER_TB0, TB0_31, TB1_31, TO_CABLE23, MGMT]
    root = node_root(tmp_path, DONE_IFACES, FIB_DONE, routes)
    assert missing_routes(Root(root), MESH) == ["10.0.0.3/32 via 10.254.0.3 dev thunderbolt1"]
    assert steps_of(root, MESH)[2] == Step(
        "fabric_routes",
        ROUTES_TITLE,
        False,
        (STATIC_ROUTES[1],),
        check="fabric.reach",
        note="1 missing; " + NOT_PERSISTENT,
    )


def test_missing_routes(tmp_path: Path) -> None:
    bare = Root(node_root(tmp_path / "bare", BARE_IFACES))
    done = Root(node_root(tmp_path / "done", DONE_IFACES, FIB_DONE, ROUTES_DONE))
    assert missing_routes(bare, MESH) == [
        "10.0.0.2/32 via 10.254.0.1 dev thunderbolt0",
        "10.0.0.3/32 via 10.254.0.3 dev thunderbolt1",
        "10.254.0.4/31 via 10.254.0.1 dev thunderbolt0",
    ]
    assert missing_routes(done, MESH) == []


def test_unreadable_route_table_means_every_route_is_missing(tmp_path: Path) -> None:
    root = node_root(tmp_path, DONE_IFACES, FIB_DONE, ROUTES_DONE)
    Path(root, "proc/net/route").write_text("garbage\n")
    assert len(missing_routes(Root(root), MESH)) == 3


def test_a_cable_at_the_wrong_mtu_or_down(tmp_path: Path) -> None:
    interfaces = {**DONE_IFACES, "thunderbolt0": (1500, "up"), "thunderbolt1": (9000, "down")}
    root = node_root(tmp_path, interfaces, FIB_DONE, ROUTES_DONE)
    assert steps_of(root, MESH)[0] == Step(
        "fabric_links",
        LINKS_TITLE,
        False,
        (
            Action(("ip", "link", "set", "dev", "thunderbolt0", "mtu", "9000", "up")),
            Action(("ip", "link", "set", "dev", "thunderbolt1", "mtu", "9000", "up")),
        ),
        check="fabric.link",
        note=NOT_PERSISTENT,
    )


def test_a_cable_that_is_not_there_has_no_actions(tmp_path: Path) -> None:
    interfaces = {k: v for k, v in DONE_IFACES.items() if k != "thunderbolt1"}
    root = node_root(tmp_path, interfaces, FIB_DONE, ROUTES_DONE)
    assert steps_of(root, MESH)[0] == Step(
        "fabric_links",
        LINKS_TITLE,
        False,
        (),
        check="fabric.link",
        note="no interface thunderbolt1 (to node3): is the cable plugged in (and "
        "thunderbolt-net loaded)? 'halo inventory' lists the interfaces",
    )


@pytest.mark.parametrize(
    ("dummy", "release", "kind"),
    [
        ("module", RELEASE, "dummy"),
        ("builtin", RELEASE, "dummy"),
        ("loaded", RELEASE, "dummy"),
        ("none", RELEASE, "bridge"),
        ("module", None, "bridge"),  # the running kernel unknown: its modules too
    ],
)
def test_identity_interface_dummy_or_bridge(
    tmp_path: Path, dummy: str, release: str | None, kind: str
) -> None:
    root = node_root(tmp_path, BARE_IFACES, dummy=dummy, release=release)
    note = NOT_PERSISTENT
    if kind == "bridge":
        note += "; this kernel has no dummy interfaces: a bridge without ports holds it"
    assert steps_of(root, MESH)[1] == Step(
        "fabric_identity",
        IDENTITY_TITLE,
        False,
        (
            Action(("ip", "link", "add", "halo0", "type", kind)),
            Action(("ip", "link", "set", "dev", "halo0", "up")),
            Action(("ip", "addr", "replace", "10.0.0.1/32", "dev", "halo0")),
        ),
        check="fabric.identity",
        note=note,
    )


def test_identity_interface_there_without_its_address(tmp_path: Path) -> None:
    interfaces = {**BARE_IFACES, "halo0": (1500, "down")}
    root = node_root(tmp_path, interfaces, dummy="none")
    # halo0 is there (down): no bridge note, it is brought up and given the address
    assert steps_of(root, MESH)[1] == Step(
        "fabric_identity",
        IDENTITY_TITLE,
        False,
        (
            Action(("ip", "link", "set", "dev", "halo0", "up")),
            Action(("ip", "addr", "replace", "10.0.0.1/32", "dev", "halo0")),
        ),
        check="fabric.identity",
        note=NOT_PERSISTENT,
    )


def test_identity_address_there_but_no_identity_interface(tmp_path: Path) -> None:
    """The identity is local (fib_trie) but halo0 is gone: halo0 is made, the address left."""
    interfaces = {k: v for k, v in DONE_IFACES.items() if k != "halo0"}
    root = node_root(tmp_path, interfaces, FIB_DONE, ROUTES_DONE)
    assert steps_of(root, MESH)[1] == Step(
        "fabric_identity",
        IDENTITY_TITLE,
        False,
        (
            Action(("ip", "link", "add", "halo0", "type", "dummy")),
            Action(("ip", "link", "set", "dev", "halo0", "up")),
        ),
        check="fabric.identity",
        note=NOT_PERSISTENT,
    )


# the identity with a prefix on eth0 (a switch NIC's old fabric address, 10.0.0.1/30)
ETH0_ID = "eth0\t0000000A\t00000000\t0001\t0\t0\t0\tFCFFFFFF\t0\t0\t0"


def test_identity_on_another_interface_is_moved_to_halo0(tmp_path: Path) -> None:
    root = node_root(tmp_path, DONE_IFACES, FIB_DONE, [*ROUTES_DONE, ETH0_ID])
    step = steps_of(root, MESH)[1]
    assert (step.done, step.actions) == (
        False,
        (
            Action(("ip", "addr", "del", "10.0.0.1/30", "dev", "eth0")),
            Action(("ip", "addr", "replace", "10.0.0.1/32", "dev", "halo0")),
        ),
    )
    assert step.note == f"{NOT_PERSISTENT}; 10.0.0.1 is on eth0 now: moved to halo0"


def test_an_identity_as_a_32_elsewhere_is_not_seen_by_setup(tmp_path: Path) -> None:
    """A /32 has no prefix route: /proc cannot tell which interface holds it, so setup
    takes it as done; the doctor (ip addr on the host) names the interface."""
    root = node_root(tmp_path, DONE_IFACES, FIB_DONE, ROUTES_DONE)
    assert steps_of(root, MESH)[1].done


@pytest.mark.parametrize(("forward", "done"), [("1\n", True), ("0\n", False), (None, False)])
def test_forwarding_needed(tmp_path: Path, forward: str | None, done: bool) -> None:
    assert LINE.forwarding and not MESH.forwarding
    root = node_root(tmp_path, DONE_IFACES, FIB_DONE, ROUTES_DONE, forward=forward)
    steps = steps_of(root, LINE)
    assert steps[:3] == [
        LINKS_DONE,
        IDENTITY_DONE,
        Step(
            "fabric_routes",
            "routes to 2 identities and cables (static)",
            True,
            (),
            check="fabric.reach",
        ),
    ]
    actions = (
        Action(("sysctl", "-q", "-w", "net.ipv4.ip_forward=1")),
        Action(path=FORWARD_FILE, content=FORWARD_TEXT),
    )
    assert steps[3] == Step(
        "fabric_forwarding",
        FORWARDING_TITLE,
        done,
        () if done else actions,
        check="fabric.forwarding",
        note="" if done else "paths between other nodes cross this one",
    )
    assert FORWARD_FILE == "etc/sysctl.d/90-halo-forward.conf"
    assert FORWARD_TEXT == (
        "# written by halo setup: this node forwards between its fabric links\n"
        "net.ipv4.ip_forward = 1\n"
    )


@pytest.mark.parametrize("forward", ["1\n", "0\n", None])
def test_forwarding_not_needed_whatever_it_is(tmp_path: Path, forward: str | None) -> None:
    root = node_root(tmp_path, DONE_IFACES, FIB_DONE, ROUTES_DONE, forward=forward)
    assert steps_of(root, MESH)[3] == NOT_NEEDED


MESH_FRR = """\
# written by halo setup: the routed fabric (openfabric)
frr defaults traditional
hostname node1
log syslog informational
!
interface halo0
 ip router openfabric 1
 openfabric passive
!
interface thunderbolt0
 ip router openfabric 1
!
interface thunderbolt1
 ip router openfabric 1
!
router openfabric 1
 net 49.0000.0100.0000.0001.00
!
"""


OPENFABRIC_NOTE = "needs the frr package; halo doctor checks every path once FRR has converged"


def test_openfabric_routing_writes_frr(tmp_path: Path) -> None:
    """No FRR configuration yet: frr.conf, a daemons file of halo's, a restart."""
    root = node_root(tmp_path, BARE_IFACES)
    assert steps_of(root, OPENFABRIC)[2] == Step(
        "fabric_routes",
        "routes by FRR's openfabric (0 of 3 routes learned)",
        False,
        (
            Action(path=FRR_FILE, content=MESH_FRR),
            Action(path=FRR_DAEMONS, content=FRR_DAEMONS_TEXT),
            Action(("systemctl", "restart", "frr")),
        ),
        check="fabric.reach",
        note=OPENFABRIC_NOTE,
    )
    assert (FRR_FILE, FRR_DAEMONS) == ("etc/frr/frr.conf", "etc/frr/daemons")
    assert FRR_DAEMONS_TEXT == (
        "# written by halo setup: zebra and fabricd (openfabric) for the routed fabric\n"
        "zebra=yes\n"
        "fabricd=yes\n"
        "vtysh_enable=yes\n"
        'zebra_options="  -A 127.0.0.1 -s 90000000"\n'
        'fabricd_options="-A 127.0.0.1"\n'
    )


DEBIAN_DAEMONS = "# the host's own\nbgpd=yes\nzebra=yes\nfabricd=no\nvtysh_enable=yes\n"


def test_openfabric_edits_the_hosts_daemons_file(tmp_path: Path) -> None:
    """The host's /etc/frr/daemons keeps every other daemon; only fabricd is turned on."""
    root = node_root(tmp_path, BARE_IFACES)
    (Path(root) / FRR_DAEMONS).parent.mkdir(parents=True)
    (Path(root) / FRR_DAEMONS).write_text(DEBIAN_DAEMONS)
    step = steps_of(root, OPENFABRIC)[2]
    edited = "# the host's own\nbgpd=yes\nzebra=yes\nfabricd=yes\nvtysh_enable=yes\n"
    assert step.actions == (
        Action(path=FRR_FILE, content=MESH_FRR),
        Action(path=FRR_DAEMONS, content=edited, shown="fabricd=yes"),
        Action(("systemctl", "restart", "frr")),
    )
    assert enable_fabricd(edited) == edited
    assert enable_fabricd("# nothing\n") == "# nothing\nzebra=yes\nfabricd=yes\n"


def test_openfabric_configured_is_done_whatever_frr_has_learned(tmp_path: Path) -> None:
    """Configured is done: which routes FRR has learned (its paths may be other ones of
    the same length than halo's plan) is the doctor's to judge, once FRR has converged."""
    for routes, learned, note in ((ROUTES_BARE, 0, OPENFABRIC_NOTE.split("; ")[1]),
                                  (ROUTES_DONE, 3, "")):  # fmt: skip
        base = tmp_path / str(learned)
        root = node_root(base, DONE_IFACES, FIB_DONE, routes)
        for rel, text in ((FRR_FILE, MESH_FRR), (FRR_DAEMONS, FRR_DAEMONS_TEXT)):
            (Path(root) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(root) / rel).write_text(text)
        assert steps_of(root, OPENFABRIC)[2] == Step(
            "fabric_routes",
            f"routes by FRR's openfabric ({learned} of 3 routes learned)",
            True,
            (),
            check="fabric.reach",
            note=note,
        )


def test_frr_config() -> None:
    assert frr_config(MESH) == MESH_FRR
    assert frr_config(OPENFABRIC) == MESH_FRR  # the routing is not in the file


def test_frr_config_system_id_is_the_identity_in_twelve_digits() -> None:
    ring = build_fabric(
        {"a": "192.168.254.7", "b": "10.10.10.10", "c": "172.16.0.1"},
        {
            "a": [("usb0", "b"), ("usb1", "c")],
            "b": [("usb0", "c"), ("usb1", "a")],
            "c": [("usb0", "a"), ("usb1", "b")],
        },
        identity_iface="fab0",
    )
    assert frr_config(ring.node("a"), area="49.0001") == (
        "# written by halo setup: the routed fabric (openfabric)\n"
        "frr defaults traditional\n"
        "hostname a\n"
        "log syslog informational\n"
        "!\n"
        "interface fab0\n"
        " ip router openfabric 1\n"
        " openfabric passive\n"
        "!\n"
        "interface usb0\n"
        " ip router openfabric 1\n"
        "!\n"
        "interface usb1\n"
        " ip router openfabric 1\n"
        "!\n"
        "router openfabric 1\n"
        " net 49.0001.1921.6825.4007.00\n"
        "!\n"
    )
    nets = {name: frr_config(part).splitlines()[-2] for name, part in ring.nodes.items()}
    assert nets == {
        "a": " net 49.0000.1921.6825.4007.00",
        "b": " net 49.0000.0100.1001.0010.00",
        "c": " net 49.0000.1720.1600.0001.00",
    }


def test_setup_steps_put_the_fabric_steps_in_place_of_the_network_step(tmp_path: Path) -> None:
    root = node_root(tmp_path, BARE_IFACES)
    steps = setup_steps(Root(root), collect_inventory(root), SetupOptions(fabric=MESH))
    ids = [s.id for s in steps]
    assert ids[2:6] == list(FABRIC_STEP_IDS)
    assert "network" not in ids
    plain = setup_steps(Root(root), collect_inventory(root), SetupOptions())
    assert not set(FABRIC_STEP_IDS) & {s.id for s in plain}


def test_no_cables_at_all(tmp_path: Path) -> None:
    alone = build_fabric({"solo": "10.0.0.9"}, {}).node("solo")
    root = node_root(tmp_path, {"eth0": (1500, "up"), "halo0": (1500, "unknown")})
    inv: Inventory = collect_inventory(root)
    links, identity, routes, forwarding = fabric_steps(Root(root), inv, alone)
    assert links == Step("fabric_links", "cables: , MTU -", True, (), check="fabric.link")
    assert routes == Step(
        "fabric_routes",
        "routes to 0 identities and cables (static)",
        True,
        (),
        check="fabric.reach",
    )
    assert forwarding.done and not identity.done
