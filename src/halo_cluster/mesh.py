"""The routed fabric of nodes cabled point to point, without a switch (a USB4/Thunderbolt
full mesh of 3 boxes, a ring of 4, or any other cabling): one /31 per cable, one identity
address per node (a /32 on its own interface), and a route from every node to every other
node's identity and to every cable it is not on, over the first link of a shortest path,
sourced from its identity. A node that a chosen path crosses forwards.

Pure and standard library only (Python 3.9): the controller plans it from halo.toml, the
node's setup applies its own part (``NodeFabric``), the doctor and the transport read it.

The paths are symmetric: the path from b to a is the path from a to b reversed, so a reply
crosses the same cables as its request (the counters see one path, and a strict reverse-path
filter passes it).
"""

from __future__ import annotations

import heapq
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from halo_cluster.errors import FabricError
from halo_cluster.jsonout import JsonObject
from halo_cluster.netnames import ifname_problem

ROUTINGS = ("static", "openfabric")
DEFAULT_IDENTITY_IFACE = "halo0"
DEFAULT_LINK_NETWORK = "10.254.0.0/24"
MIN_MTU, MAX_MTU = 1280, 65520  # IPv6's minimum (USB4 networking carries both) to the largest
# a fabric's routes are n * (n + cables): these keep a plan to seconds and tens of MB (a ring
# of 1000 nodes, a 130 KB halo.toml, took 27 s and 700 MB even with paths kept in O(n²))
MAX_NODES = 256
MAX_CABLES = 1024


@dataclass(frozen=True)
class Link:
    """One end of a cable, seen from its node: the interface, this end's address (/31), the
    node at the other end and that end's address and interface."""

    ifname: str
    address: str  # CIDR, e.g. 10.254.0.0/31
    peer: str
    peer_address: str  # plain address
    peer_ifname: str
    mtu: int

    @property
    def ip(self) -> str:
        return self.address.split("/")[0]

    def to_dict(self) -> JsonObject:
        return {
            "ifname": self.ifname,
            "address": self.address,
            "peer": self.peer,
            "peer_address": self.peer_address,
            "peer_ifname": self.peer_ifname,
            "mtu": self.mtu,
        }


@dataclass(frozen=True)
class Route:
    """``destination`` (a CIDR) via the neighbour's link address on ``dev``; ``to``: the node
    (or cable, ``a-b``) it leads to, ``hops``: cables crossed."""

    destination: str
    via: str
    dev: str
    to: str
    hops: int

    def to_dict(self) -> JsonObject:
        return {
            "destination": self.destination,
            "via": self.via,
            "dev": self.dev,
            "to": self.to,
            "hops": self.hops,
        }


@dataclass(frozen=True)
class NodeFabric:
    """One node's part of the routed fabric: what its setup applies and its doctor checks."""

    node: str
    identity: str  # plain address; a /32 on ``identity_iface``
    identity_iface: str
    links: tuple[Link, ...]
    routes: tuple[Route, ...]
    forwarding: bool  # some chosen path crosses this node
    routing: str = "static"

    @property
    def mtu(self) -> int:
        """The smallest MTU of the node's cables (0 without cables): what every path carries."""
        return min((link.mtu for link in self.links), default=0)

    @property
    def ifnames(self) -> tuple[str, ...]:
        return tuple(link.ifname for link in self.links)

    def route_to(self, node: str) -> Route | None:
        """The route to ``node``'s identity (None for this node itself)."""
        return next((r for r in self.routes if r.to == node and "/32" in r.destination), None)

    def link(self, ifname: str) -> Link | None:
        return next((link for link in self.links if link.ifname == ifname), None)

    def to_dict(self) -> JsonObject:
        return {
            "node": self.node,
            "identity": self.identity,
            "identity_iface": self.identity_iface,
            "links": [link.to_dict() for link in self.links],
            "routes": [route.to_dict() for route in self.routes],
            "forwarding": self.forwarding,
            "routing": self.routing,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeFabric:
        """What ``to_dict`` wrote (the setup command's ``--fabric``); FabricError when not."""
        try:
            links = tuple(_link_of(d) for d in data["links"])
            routes = tuple(
                Route(
                    _cidr(d["destination"]),
                    _ip(d["via"]),
                    _name(d["dev"]),
                    str(d["to"]),
                    _hops(d["hops"]),
                )
                for d in data["routes"]
            )
            routing = str(data.get("routing", "static"))
            if routing not in ROUTINGS or not isinstance(data["forwarding"], bool):
                raise ValueError("routing or forwarding")
            return cls(
                str(data["node"]),
                _ip(data["identity"]),
                _name(data["identity_iface"]),
                links,
                routes,
                data["forwarding"],
                routing,
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as err:
            raise FabricError(f"not a node's fabric ({err})") from None


@dataclass(frozen=True)
class Cable:
    """A cable between ``a`` and ``b`` (node, interface), and its /31."""

    a: tuple[str, str]
    b: tuple[str, str]
    network: str

    @property
    def label(self) -> str:
        return f"{self.a[0]}:{self.a[1]}-{self.b[0]}:{self.b[1]}"


@dataclass(frozen=True)
class Fabric:
    """Every node's part, the cables, and the shape they make."""

    topology: str  # mesh (every pair cabled once), ring, or routed (any other cabling)
    cables: tuple[Cable, ...]
    nodes: Mapping[str, NodeFabric]

    def node(self, name: str) -> NodeFabric:
        return self.nodes[name]

    def reach(self, name: str) -> dict[str, JsonObject]:
        """How ``name`` reaches each other node: the cable (its interface), the hops and
        the nodes crossed on the way (the JSON of ``halo env --node``)."""
        part = self.nodes[name]
        found: dict[str, JsonObject] = {}
        for peer in self.nodes:
            route = part.route_to(peer)
            if route is not None:
                found[peer] = {
                    "identity": self.nodes[peer].identity,
                    "ifname": route.dev,
                    "hops": route.hops,
                    "via": self.path(name, peer)[1:-1],
                }
        return found

    def path(self, a: str, b: str) -> list[str]:
        """The nodes a packet from ``a`` to ``b``'s identity crosses, ``a`` and ``b``
        included."""
        here, seen = a, [a]
        while here != b:
            route = self.nodes[here].route_to(b)
            if route is None:
                return seen
            here = next(link.peer for link in self.nodes[here].links if link.ifname == route.dev)
            seen.append(here)
        return seen


def build_fabric(
    identities: Mapping[str, str],
    cabling: Mapping[str, Sequence[tuple[str, str]]],
    link_network: str = DEFAULT_LINK_NETWORK,
    mtu: int = 9000,
    identity_iface: str = DEFAULT_IDENTITY_IFACE,
    routing: str = "static",
) -> Fabric:
    """The routed fabric of ``identities`` (node -> address, in the cluster's node order)
    cabled as ``cabling`` says (node -> [(interface, peer node)]; both ends of a cable name
    it, the k-th cable between two nodes pairs the k-th mention on each side). FabricError
    (one line) for what cannot be one."""
    _check_values(identities, cabling, link_network, mtu, identity_iface, routing)
    order = list(identities)
    cables = _cables(order, cabling, link_network)
    paths, crossed = _paths(order, cables)
    unreached = [name for name in order if name not in paths[order[0]]]
    if unreached:
        raise FabricError(
            f"{', '.join(unreached)} cannot be reached from {order[0]} over the cables: "
            "every node needs a path to every other"
        )
    nodes = {
        name: _node_fabric(
            name,
            identities,
            cables,
            paths[name],
            mtu,
            identity_iface,
            routing,
            [ifname for ifname, _ in cabling.get(name, ())],
            name in crossed,
        )
        for name in order
    }
    return Fabric(_shape(order, cables), tuple(cables), nodes)


def _check_values(
    identities: Mapping[str, str],
    cabling: Mapping[str, Sequence[tuple[str, str]]],
    link_network: str,
    mtu: int,
    identity_iface: str,
    routing: str,
) -> None:
    """What a plan is made of, before any of it: routing, MTU, names, identities."""
    if not identities:
        raise FabricError("no nodes")
    if len(identities) > MAX_NODES:
        raise FabricError(
            f"{len(identities)} nodes: a routed fabric has at most {MAX_NODES}; "
            "put more on a switch"
        )
    cables = sum(len(ends) for ends in cabling.values()) // 2
    if cables > MAX_CABLES:
        raise FabricError(
            f"{cables} cables: a routed fabric has at most {MAX_CABLES}; put more on a switch"
        )
    if routing not in ROUTINGS:
        raise FabricError(f"routing {routing!r}: use one of {', '.join(ROUTINGS)}")
    if isinstance(mtu, bool) or not isinstance(mtu, int) or not MIN_MTU <= mtu <= MAX_MTU:
        raise FabricError(f"mtu {mtu!r}: a whole number from {MIN_MTU} to {MAX_MTU}")
    for name in [identity_iface, *(i for ends in cabling.values() for i, _ in ends)]:
        if ifname_problem(name):
            raise FabricError(f"interface name {name!r} {ifname_problem(name)}")
    try:
        pool = ipaddress.IPv4Network(link_network)
    except ValueError as err:
        raise FabricError(f"link network {link_network!r}: {err}") from None
    seen: dict[str, str] = {}
    for node, address in identities.items():
        try:
            ip = ipaddress.IPv4Address(address)
        except ValueError:
            raise FabricError(f"{node}: identity {address!r} is not an IPv4 address") from None
        if str(ip) in seen:
            raise FabricError(f"{seen[str(ip)]} and {node} have the same identity {ip}")
        if ip in pool:
            raise FabricError(
                f"{node}: identity {ip} is inside the link network {pool} (a cable's address)"
            )
        seen[str(ip)] = node
    for node, ends in cabling.items():
        if identity_iface in {ifname for ifname, _ in ends}:
            raise FabricError(
                f"{node}: {identity_iface} is a cable and the identity interface: name the "
                "identity interface otherwise ([fabric] identity_iface)"
            )


def _cables(
    order: Sequence[str], cabling: Mapping[str, Sequence[tuple[str, str]]], network: str
) -> list[Cable]:
    try:
        pool = ipaddress.IPv4Network(network)
    except ValueError as err:
        raise FabricError(f"link network {network!r}: {err}") from None
    index = {name: i for i, name in enumerate(order)}
    for name, ends in cabling.items():
        if name not in index:
            raise FabricError(f"links of {name!r}: no such node")
        names = [ifname for ifname, _ in ends]
        if len(set(names)) != len(names):
            raise FabricError(f"{name}: an interface is named for two cables")
        for ifname, peer in ends:
            if peer not in index or peer == name:
                raise FabricError(f"{name}:{ifname} is cabled to {peer!r}: not another node")
    cables: list[Cable] = []
    subnets = pool.subnets(new_prefix=31) if pool.prefixlen <= 31 else iter(())
    for a in order:
        for b in order[index[a] + 1 :]:
            ours = [i for i, peer in cabling.get(a, ()) if peer == b]
            theirs = [i for i, peer in cabling.get(b, ()) if peer == a]
            if len(ours) != len(theirs):
                raise FabricError(
                    f"{a} names {len(ours)} cable(s) to {b}, {b} names {len(theirs)} to {a}: "
                    "both ends of a cable must name it"
                )
            for mine, other in zip(ours, theirs):
                subnet = next(subnets, None)
                if subnet is None:
                    raise FabricError(f"link network {network} has no /31 left for {a}-{b}")
                cables.append(Cable((a, mine), (b, other), str(subnet)))
    return cables


@dataclass(frozen=True)
class _Path:
    """The chosen path from one node to another, as much of it as the routes need: the
    cable it leaves on (an index into the fabric's cables; -1 from a node to itself), how
    many cables it crosses, and its weight. Not the nodes on it: n² paths of up to n nodes each
    would cost n³ (a ring of 1000 took gigabytes)."""

    first: int
    hops: int
    weight: int


def _paths(
    order: Sequence[str], cables: Sequence[Cable]
) -> tuple[dict[str, dict[str, _Path]], set[str]]:
    """From every node, the one shortest path to every node it reaches; and the nodes some
    chosen path crosses (they forward). Cable i weighs 2**m + 2**i (m cables): fewer cables
    always win, and among paths of as many cables the sums of distinct powers of two never
    tie. So each shortest path is the only one: the path from b to a is the path from a to b
    reversed, and every part of a chosen path is the path chosen between its ends, which
    makes the nodes' routes agree with the paths through them (no node sends a packet
    another way than its neighbour meant). O(n²) paths kept, each of a fixed size."""
    base = 1 << len(cables)
    adjacency: dict[str, list[tuple[str, int]]] = {name: [] for name in order}
    for index, cable in enumerate(cables):
        adjacency[cable.a[0]].append((cable.b[0], index))
        adjacency[cable.b[0]].append((cable.a[0], index))
    found = {}
    crossed: set[str] = set()
    for source in order:
        best: dict[str, _Path] = {source: _Path(-1, 0, 0)}
        before: dict[str, str] = {}  # the node before each on its path from source
        queue = [(0, source)]
        done: set[str] = set()
        while queue:
            weight, here = heapq.heappop(queue)
            if here in done:
                continue
            done.add(here)
            path = best[here]
            for there, index in adjacency[here]:
                step = weight + base + (1 << index)
                if there not in best or step < best[there].weight:
                    first = index if here == source else path.first
                    best[there] = _Path(first, path.hops + 1, step)
                    before[there] = here
                    heapq.heappush(queue, (step, there))
        crossed.update(here for here in before.values() if here != source)
        found[source] = best
    return found, crossed


def _node_fabric(
    name: str,
    identities: Mapping[str, str],
    cables: Sequence[Cable],
    paths: Mapping[str, _Path],
    mtu: int,
    identity_iface: str,
    routing: str,
    declared: Sequence[str],
    forwarding: bool,
) -> NodeFabric:
    """``paths``: this node's path to every other; ``declared``: the node's interfaces in
    the order its links name them (its links, and so its rails, keep that order)."""
    ours = {i: _link(name, cable, mtu) for i, cable in enumerate(cables) if name in _ends(cable)}
    links = tuple(sorted(ours.values(), key=lambda link: declared.index(link.ifname)))
    routes = []
    for peer in identities:  # in the cluster's order
        if peer != name:
            path = paths[peer]
            link = ours[path.first]
            routes.append(
                Route(f"{identities[peer]}/32", link.peer_address, link.ifname,
                      peer, path.hops)
            )  # fmt: skip
    for index, cable in enumerate(cables):
        if index in ours:
            continue
        # a cable this node is not on: towards its nearer end (routes through the nodes on
        # the way agree: the nearer end for this node is the nearer one for them too)
        near = min(_ends(cable), key=lambda end: paths[end].weight)
        link = ours[paths[near].first]
        routes.append(
            Route(cable.network, link.peer_address, link.ifname,
                  f"{cable.a[0]}-{cable.b[0]}", paths[near].hops + 1)
        )  # fmt: skip
    return NodeFabric(
        name, identities[name], identity_iface, links, tuple(routes), forwarding, routing
    )


def _ends(cable: Cable) -> tuple[str, str]:
    return cable.a[0], cable.b[0]


def _link(name: str, cable: Cable, mtu: int) -> Link:
    network = ipaddress.IPv4Network(cable.network)
    first, second = str(network[0]), str(network[1])
    if cable.a[0] == name:
        return Link(cable.a[1], f"{first}/31", cable.b[0], second, cable.b[1], mtu)
    return Link(cable.b[1], f"{second}/31", cable.a[0], first, cable.a[1], mtu)


def _shape(order: Sequence[str], cables: Sequence[Cable]) -> str:
    pairs = {frozenset((c.a[0], c.b[0])) for c in cables}
    n = len(order)
    if cables and len(pairs) == n * (n - 1) // 2 and len(cables) == len(pairs):
        return "mesh"
    degree = {name: sum(name in p for p in pairs) for name in order}
    if n >= 3 and len(cables) == n and all(d == 2 for d in degree.values()):
        return "ring"
    return "routed"


def _ip(value: Any) -> str:
    return str(ipaddress.IPv4Address(str(value)))


def _cidr(value: Any) -> str:
    return str(ipaddress.IPv4Interface(str(value)))


def _name(value: Any) -> str:
    text = str(value)
    if ifname_problem(text):
        raise ValueError(f"interface name {text!r} {ifname_problem(text)}")
    return text


def _mtu(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_MTU <= value <= MAX_MTU:
        raise ValueError(f"mtu {value!r}")
    return value


def _hops(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
        raise ValueError(f"hops {value!r}")
    return value


def _link_of(data: Mapping[str, Any]) -> Link:
    """A link as ``Link.to_dict`` wrote it: its address a /31 that holds the far end's."""
    address = ipaddress.IPv4Interface(str(data["address"]))
    peer = ipaddress.IPv4Address(str(data["peer_address"]))
    if address.network.prefixlen != 31 or peer not in address.network or peer == address.ip:
        raise ValueError(f"link {address} and its far end {peer}: not the two ends of a /31")
    return Link(
        _name(data["ifname"]),
        str(address),
        str(data["peer"]),
        str(peer),
        _name(data["peer_ifname"]),
        _mtu(data["mtu"]),
    )
