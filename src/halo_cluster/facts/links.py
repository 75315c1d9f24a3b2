"""A node's host's view of its routed fabric (nodes cabled point to point): each cable's
interface as the host sees it (carrier, MTU, error counters), whether it forwards, which
interface holds its identity address, and the interface the kernel routes each peer's
identity over. Read by one host script (``cluster/gather.py``) whose lines this parses.

The lines, one fact each (fields separated by spaces; ``-`` when unreadable)::

    link IFNAME CARRIER MTU RX_ERRORS TX_ERRORS     or   link IFNAME missing
    forward 0|1
    identity IFNAME
    route PEER IFNAME

(the script itself asks the kernel for every peer's route with ``ip -batch``, whose lines
``parse_route_get`` reads; the caller names the peers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from halo_cluster.errors import ParseError


@dataclass(frozen=True)
class LinkState:
    name: str
    present: bool
    carrier: bool | None = None  # None: unreadable (the interface is administratively down)
    mtu: int | None = None
    rx_errors: int | None = None
    tx_errors: int | None = None


@dataclass(frozen=True)
class FabricView:
    links: Mapping[str, LinkState] = field(default_factory=dict)
    forwarding: bool | None = None
    identity_iface: str | None = None  # None: no interface holds the identity address
    routes: Mapping[str, str | None] = field(default_factory=dict)  # peer -> interface


def parse_route_get(text: str) -> dict[str, str]:
    """``ip -o route get`` lines (several, from ``ip -batch``) -> destination -> the
    interface it leaves by. A line without ``dev`` (a lookup that failed) or of another
    shape is passed over, and so is a local or unreachable one: that destination has no
    route out."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[0] in ("local", "broadcast", "unreachable", "prohibit"):
            continue
        for index, word in enumerate(parts[:-1]):
            if word == "dev":
                found.setdefault(parts[0], parts[index + 1])
                break
    return found


def _number(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) < 20 else None


def parse_fabric_view(text: str) -> FabricView:
    """The script's lines; a line of another shape is garbage (ParseError)."""
    links: dict[str, LinkState] = {}
    routes: dict[str, str | None] = {}
    forwarding: bool | None = None
    identity: str | None = None
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        kind = parts[0]
        if kind == "link" and len(parts) == 3 and parts[2] == "missing":
            links[parts[1]] = LinkState(parts[1], False)
        elif kind == "link" and len(parts) == 6:
            carrier = {"1": True, "0": False}.get(parts[2])
            links[parts[1]] = LinkState(
                parts[1], True, carrier, _number(parts[3]), _number(parts[4]), _number(parts[5])
            )
        elif kind == "forward" and len(parts) == 2:
            forwarding = {"1": True, "0": False}.get(parts[1])
        elif kind == "identity" and len(parts) == 2:
            identity = None if parts[1] == "-" else parts[1]
        elif kind == "route" and len(parts) == 3:
            routes[parts[1]] = None if parts[2] == "-" else parts[2]
        else:
            raise ParseError("the host's view of the fabric: a line of no known shape", line)
    return FabricView(links, forwarding, identity, routes)
