"""The lab's state file and names: everything ``down`` needs to remove what ``up`` made."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from halo_cluster.atomic import atomic_write
from halo_cluster.errors import UsageError
from halo_cluster.jsonout import JsonObject, JsonValue
from halo_cluster.mesh import build_fabric

MGMT_NET = "198.18"  # 198.18.0.0/15 is reserved for network benchmarking (RFC 2544)
FABRIC_NET = "198.19"
MGMT_IF = "eno1"
RUN_DIR = Path("/run/halo/lab")
FABRIC_IF = "enp194s0np0"
MAX_NODES = 32  # what one 2-core, 24 GB machine runs (benchmarks/bench_scale.py)
TOPOLOGIES = ("switch", "mesh", "ring")
MAX_MESH_NODES = 8  # 28 cables; a USB4 box has two or three ports, a real mesh is 3 or 4
LINK_IF = "thunderbolt"  # a cable's ends are named as USB4 networking names them
LINK_NET_OFFSET = 128  # cables take 198.19.<subnet>.128/25 (64 /31s), identities .11 and up
NODE_STORE = "/var/lib/halo/models"  # where a node sees its own model store
_NAME = re.compile(r"^[a-z][a-z0-9]{0,7}$")


@dataclass(frozen=True)
class LabNode:
    name: str
    netns: str
    mgmt_address: str
    fabric_address: str
    host_mgmt_veth: str
    host_fabric_veth: str
    init_pid: int | None = None  # host PID of the node's PID-namespace init
    # a mesh or ring: the node's cables (its interface, the node at the other end); with
    # them ``fabric_address`` is the node's identity, which 'halo setup' puts on halo0
    links: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class LabState:
    name: str
    dir: str
    subnet: int  # third octet shared by both networks
    fabric_mtu: int
    mgmt_bridge: str
    fabric_bridge: str
    nodes: tuple[LabNode, ...]
    engine: str | None = None  # the engine environment every node sees, read-only
    llama_cpp: str | None = None  # the llama.cpp build every node sees, read-only
    # the host's halo that nodes run (--installed); None (--bare, the default): nodes do not
    # see halo's environment at all and get halo's node code over SSH
    halo: str | None = None
    # each node's fabric link limited to this rate both ways (the kernel's tbf qdisc), e.g.
    # "1gbit"; None: as fast as the host copies
    fabric_rate: str | None = None
    # each node's model store a tmpfs of this size (a small disk that can fill); None: a
    # directory of the lab's on the host's disk
    store_size: str | None = None
    topology: str = "switch"  # or mesh / ring: cables between nodes, no fabric bridge

    @property
    def routed(self) -> bool:
        return self.topology != "switch"

    @property
    def link_network(self) -> str:
        """Where the cables' /31s come from (a mesh or ring)."""
        return f"{FABRIC_NET}.{self.subnet}.{LINK_NET_OFFSET}/25"

    @property
    def host_address(self) -> str:
        return f"{MGMT_NET}.{self.subnet}.1"

    def node(self, name: str) -> LabNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise UsageError(
            f"lab {self.name} has no node {name!r} (nodes: {', '.join(n.name for n in self.nodes)})"
        )

    def to_dict(self) -> JsonObject:
        return asdict(self)

    def store(self, node: LabNode) -> str:
        """The host directory behind the node's model store (only that node sees it, at
        ``NODE_STORE``; inside every node the lab's ``stores`` directory is hidden)."""
        return str(Path(self.dir) / "stores" / node.name)

    def home(self, node: LabNode) -> str:
        """The node's own HOME (state, caches, logs): hosts do not share theirs."""
        return str(Path(self.dir) / "home" / node.name)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> LabState:
        nodes = tuple(
            LabNode(**{**node, "links": tuple(tuple(end) for end in node.get("links", ()))})
            for node in data["nodes"]
        )
        return LabState(**{**data, "nodes": nodes})


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise UsageError(
            f"lab name {name!r}: use 1-8 lowercase letters and digits, starting with a letter"
        )
    return name


def new_lab_state(
    name: str,
    directory: Path,
    nodes: int,
    fabric_mtu: int,
    subnet: int,
    engine: str | None = None,
    llama_cpp: str | None = None,
    halo: str | None = None,
    fabric_rate: str | None = None,
    store_size: str | None = None,
    topology: str = "switch",
) -> LabState:
    """Names and addresses, computed before anything is created. Interface names stay
    within the kernel's 15 characters."""
    cabling = lab_cabling(topology, nodes)
    members = tuple(
        LabNode(
            name=f"node{i}",
            netns=f"halo-{name}-node{i}",
            mgmt_address=f"{MGMT_NET}.{subnet}.{10 + i}",
            fabric_address=f"{FABRIC_NET}.{subnet}.{10 + i}",
            host_mgmt_veth=f"hv{name}{i}m",
            host_fabric_veth=f"hv{name}{i}f",
            links=cabling.get(f"node{i}", ()),
        )
        for i in range(1, nodes + 1)
    )
    return LabState(
        name,
        str(directory),
        subnet,
        fabric_mtu,
        f"hb{name}m",
        f"hb{name}f",
        members,
        engine,
        llama_cpp,
        halo,
        fabric_rate,
        store_size,
        topology,
    )


def lab_cabling(topology: str, nodes: int) -> dict[str, tuple[tuple[str, str], ...]]:
    """Each node's cables (interface, peer): a mesh cables every pair, a ring each node to
    the next and the one before; a switch has none. Ports are numbered per node in the
    order its cables are made (node by node, each to the ones after it)."""
    names = [f"node{i}" for i in range(1, nodes + 1)]
    if topology == "mesh":
        pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    elif topology == "ring":
        pairs = [(names[i], names[(i + 1) % nodes]) for i in range(nodes)]
    else:
        return {}
    ends: dict[str, list[tuple[str, str]]] = {name: [] for name in names}
    for a, b in pairs:
        for here, there in ((a, b), (b, a)):
            ends[here].append((f"{LINK_IF}{len(ends[here])}", there))
    return {name: tuple(found) for name, found in ends.items()}


def cables(state: LabState) -> list[tuple[tuple[LabNode, str], tuple[LabNode, str]]]:
    """The lab's cables, each once: ((node, its interface), (peer, the peer's interface)),
    paired as the routed fabric pairs them (``mesh.build_fabric``)."""
    if not state.routed:
        return []
    by_name = {node.name: node for node in state.nodes}
    fabric = build_fabric(
        {n.name: n.fabric_address for n in state.nodes},
        {n.name: n.links for n in state.nodes},
        state.link_network,
        state.fabric_mtu,
    )
    return [((by_name[c.a[0]], c.a[1]), (by_name[c.b[0]], c.b[1])) for c in fabric.cables]


def state_path(directory: Path) -> Path:
    return directory / "state.json"


def runtime_dir(name: str) -> Path:
    """The lab's directory under /run (root's, gone at reboot with the namespaces): its
    registry entry, and its SSH control sockets (inside every node, a private one of the same
    name: nodes have their own /run)."""
    return RUN_DIR / name


def neighbour_file() -> Path:
    """The host's neighbour-table thresholds from before the first lab raised them (sysctl
    name -> value), kept until the last lab is down (and gone at reboot, with the change)."""
    return RUN_DIR / "neighbour-table.json"


def control_dir(name: str) -> Path:
    return runtime_dir(name) / "ssh"


def write_state(state: LabState) -> None:
    """Atomically (a crash mid-write never leaves half a state file), into the lab's
    directory and into the registry under /run, so that the lab is found by name from
    anywhere, and taken down even when its directory is gone."""
    _write_json(state_path(Path(state.dir)), state.to_dict())
    try:
        control_dir(state.name).mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_json(state_path(runtime_dir(state.name)), state.to_dict())
    except OSError:
        pass  # not root: a lab cannot be built anyway, and its directory still has it


def _write_json(path: Path, data: JsonValue) -> None:
    atomic_write(path, json.dumps(data, indent=2), prefix=".state.")


def read_state(directory: Path) -> LabState | None:
    path = state_path(directory)
    try:
        return LabState.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (ValueError, KeyError, TypeError, OSError) as err:
        raise UsageError(
            f"{path} is not a lab state file ({err}); remove the lab with 'halo lab down'"
        ) from None


def registered(name: str) -> LabState | None:
    """The registry's copy of lab ``name``'s state (None when it has none)."""
    return read_state(runtime_dir(name))


def registered_names() -> list[str]:
    try:
        return sorted(p.parent.name for p in RUN_DIR.glob("*/state.json"))
    except OSError:
        return []
