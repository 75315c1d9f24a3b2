"""The transport plan: a pure function from one node's facts (+ the peer's address and the
wanted transport) to the environment NCCL/RCCL, Gloo, Ray and vLLM need on that node.

Plans are per node: HCA names and GID indexes differ between nodes, so every node
computes its own (never "auto" decided on the head and pushed to the workers).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from halo_cluster.errors import TransportError, UsageError
from halo_cluster.facts.model import Gid, Inventory, NetInterface, RdmaDevice, RdmaPort

WANTED = ("auto", "infiniband", "roce", "ethernet", "thunderbolt")
RDMA_TRANSPORTS = ("infiniband", "roce")
SOFTWARE_RDMA_DRIVERS = frozenset({"rdma_rxe", "rxe", "siw"})
# AMD APUs: the GPU's memory is host memory behind the IOMMU, so a NIC cannot DMA into it
# through GPUDirect RDMA; RCCL must stage through host buffers.
AMD_APU_TARGETS = frozenset(
    {"gfx1151", "gfx1150", "gfx1152", "gfx1103", "gfx1037", "gfx1036", "gfx1035", "gfx90c"}
)
ROCE_MIN_NETDEV_MTU = 4200  # 4096-byte RoCE MTU needs netdev MTU >= 4096 + headers


@dataclass(frozen=True)
class TransportPlan:
    transport: str
    hca: str | None
    gid_index: int | None
    socket_ifname: str | None
    address: str | None
    env: Mapping[str, str]
    reasons: Mapping[str, str]
    warnings: tuple[str, ...] = field(default=())

    @property
    def is_rdma(self) -> bool:
        return self.transport in RDMA_TRANSPORTS

    def to_dict(self) -> dict[str, Any]:
        return {
            "transport": self.transport,
            "hca": self.hca,
            "gid_index": self.gid_index,
            "socket_ifname": self.socket_ifname,
            "address": self.address,
            "env": dict(self.env),
            "reasons": dict(self.reasons),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TransportPlan:
        """The plan ``to_dict`` wrote (the cluster state file keeps every node's)."""
        return cls(**{**data, "warnings": tuple(data.get("warnings", ()))})


@dataclass(frozen=True)
class _Candidate:
    device: RdmaDevice
    port: RdmaPort
    kind: str  # infiniband / roce

    @property
    def label(self) -> str:
        return f"{self.device.name}/{self.port.port}"


def plan_transport(inv: Inventory, wanted: str = "auto", peer: str | None = None) -> TransportPlan:
    """Choose the transport, port, GID and interface for this node; raise TransportError
    when ``wanted`` cannot work here (never a silent downgrade)."""
    if wanted not in WANTED:
        raise UsageError(f"unknown transport {wanted!r}; choose one of {', '.join(WANTED)}")
    peer_ip = _peer_address(peer)
    if wanted in RDMA_TRANSPORTS:
        return _rdma_plan(inv, _pick_rdma(inv, wanted, peer_ip), peer_ip)
    if wanted == "auto":
        for kind in RDMA_TRANSPORTS:
            candidates = _usable(inv, kind, allow_software=False)
            if peer_ip is not None:
                candidates = [c for c in candidates if _reaches(inv, c, peer_ip)]
            if candidates:
                return _rdma_plan(inv, _fastest(candidates), peer_ip)
    return _tcp_plan(inv, wanted, peer_ip)


# -- choosing --------------------------------------------------------------------------------
def _peer_address(peer: str | None) -> ipaddress.IPv4Address | None:
    if peer is None:
        return None
    try:
        return ipaddress.IPv4Address(peer)
    except ValueError:
        raise UsageError(f"--peer must be an IPv4 address, got {peer!r}") from None


def _candidates(inv: Inventory, kind: str) -> list[_Candidate]:
    layer = "InfiniBand" if kind == "infiniband" else "Ethernet"
    return [
        _Candidate(dev, port, kind)
        for dev in inv.rdma
        for port in dev.ports
        if port.link_layer == layer
    ]


def _usable(inv: Inventory, kind: str, allow_software: bool) -> list[_Candidate]:
    found = []
    for cand in _candidates(inv, kind):
        if cand.port.state != "ACTIVE":
            continue
        if not allow_software and cand.device.driver in SOFTWARE_RDMA_DRIVERS:
            continue
        if kind == "roce" and not _v2_ipv4_gids(cand.port):
            continue
        found.append(cand)
    return found


def _pick_rdma(inv: Inventory, kind: str, peer: ipaddress.IPv4Address | None) -> _Candidate:
    every = _candidates(inv, kind)
    if not every:
        layer = "InfiniBand" if kind == "infiniband" else "Ethernet (RoCE)"
        raise TransportError(
            f"{kind} requested but this node has no RDMA port with {layer} link layer"
        )
    usable = _usable(inv, kind, allow_software=True)
    if not usable:
        raise TransportError(f"{kind} requested but {_why_unusable(every)}")
    if peer is not None:
        reaching = [c for c in usable if _reaches(inv, c, peer)]
        if not reaching:
            names = ", ".join(c.label for c in usable)
            raise TransportError(
                f"{kind} requested but no usable port ({names}) reaches peer {peer}"
            )
        usable = reaching
    return _fastest(usable)


def _why_unusable(candidates: Sequence[_Candidate]) -> str:
    reasons = []
    for cand in candidates:
        if cand.port.state != "ACTIVE":
            reasons.append(f"port {cand.label} is {cand.port.state or 'in an unknown state'}")
        else:
            reasons.append(
                f"port {cand.label} has no RoCE v2 GID with an IPv4 address "
                f"(is an address configured on {cand.port.netdev or 'its interface'}?)"
            )
    return "; ".join(reasons)


def _fastest(candidates: Sequence[_Candidate]) -> _Candidate:
    return min(candidates, key=lambda c: (-(c.port.rate_gbps or 0.0), c.label))


def _reaches(inv: Inventory, cand: _Candidate, peer: ipaddress.IPv4Address) -> bool:
    iface = inv.interface(cand.port.netdev)
    return iface is not None and _network_address(iface, peer) is not None


def _network_address(iface: NetInterface, peer: ipaddress.IPv4Address) -> str | None:
    """This interface's address on the connected network that contains ``peer``."""
    for cidr in iface.ipv4:
        network = ipaddress.IPv4Interface(cidr)
        if peer in network.network:
            return str(network.ip)
    return None


def _v2_ipv4_gids(port: RdmaPort) -> list[Gid]:
    return [gid for gid in port.gids if gid.type == "RoCE v2" and gid.ipv4]


def _others_warning(chosen: str, others: Sequence[str]) -> tuple[str, ...]:
    if not others:
        return ()
    return (
        f"several usable ports; chose {chosen} (fastest, then by name) over {', '.join(others)}; "
        "pass --peer to choose the one that reaches the other node",
    )


# -- RDMA plans -------------------------------------------------------------------------------
def _rdma_plan(
    inv: Inventory, cand: _Candidate, peer: ipaddress.IPv4Address | None
) -> TransportPlan:
    warnings: list[str] = []
    iface = inv.interface(cand.port.netdev)
    if peer is None:
        others = [c.label for c in _usable(inv, cand.kind, allow_software=True) if c != cand]
        others += [
            c.label
            for kind in RDMA_TRANSPORTS
            if kind != cand.kind
            for c in _usable(inv, kind, allow_software=False)
        ]
        warnings += _others_warning(cand.label, others)
    if cand.kind == "infiniband":
        gid_index, address = 0, _interface_address(iface, peer)
        gid_reason = "InfiniBand ports address by LID; GID 0 holds the port GUID"
    else:
        gid_index, address, gid_reason = _roce_gid(cand, iface, peer, warnings)
    if cand.device.driver in SOFTWARE_RDMA_DRIVERS:
        warnings.append(
            f"{cand.label} is software RDMA ({cand.device.driver}): slower than kernel TCP; "
            "use it to test, not to serve"
        )
    if cand.kind == "roce" and iface is not None and (iface.mtu or 0) < ROCE_MIN_NETDEV_MTU:
        warnings.append(
            f"{iface.name} MTU is {iface.mtu}: RoCE will run at 1024-byte MTU; "
            "set MTU 9000 on both nodes"
        )
    socket = _socket_interface(inv, iface, peer, warnings)
    hca = f"{cand.device.name}:{cand.port.port}"
    env, reasons = _base_env(socket, address)
    _put(env, reasons, "NCCL_IB_DISABLE", "0", "RDMA is wanted: let NCCL use its IB/RoCE transport")
    _put(
        env,
        reasons,
        "NCCL_NET",
        "IB",
        "fail at start-up instead of falling back to sockets silently",
    )
    _put(
        env,
        reasons,
        "NCCL_IB_HCA",
        f"={hca}",
        f"exact match (=): {cand.device.name} must not also select {cand.device.name}0 etc.",
    )
    _put(env, reasons, "NCCL_IB_GID_INDEX", str(gid_index), gid_reason)
    _gdr(inv, cand, env, reasons)
    driver = cand.device.driver or "unknown driver"
    transport_reason = f"{cand.kind} on {cand.label} ({_rate(cand.port)}, {driver})"
    return TransportPlan(
        transport=cand.kind,
        hca=hca,
        gid_index=gid_index,
        socket_ifname=socket.name if socket else None,
        address=address,
        env=env,
        reasons={"transport": transport_reason, **reasons},
        warnings=tuple(warnings),
    )


def _roce_gid(
    cand: _Candidate,
    iface: NetInterface | None,
    peer: ipaddress.IPv4Address | None,
    warnings: list[str],
) -> tuple[int, str, str]:
    """The IPv4 RoCE v2 entry for the interface's address (on the peer's network if known)."""
    gids = _v2_ipv4_gids(cand.port)
    preferred = _interface_address(iface, peer)
    own = {cidr.split("/")[0] for cidr in iface.ipv4} if iface else set()
    chosen = next((g for g in gids if g.ipv4 == preferred), None) or next(
        (g for g in gids if g.ipv4 in own), None
    )
    if chosen is None:
        chosen = gids[0]
        warnings.append(
            f"no RoCE v2 GID of {cand.label} matches an address of {cand.port.netdev}; "
            f"using index {chosen.index} ({chosen.ipv4})"
        )
    reason = (
        f"the RoCE v2 entry of {cand.label} for {chosen.ipv4} ({cand.port.netdev}) "
        f"is index {chosen.index}"
    )
    return chosen.index, str(chosen.ipv4), reason


def _gdr(inv: Inventory, cand: _Candidate, env: dict[str, str], reasons: dict[str, str]) -> None:
    apus = [gpu.name for gpu in inv.gpus if gpu.vendor == "amd" and gpu.name in AMD_APU_TARGETS]
    if apus:
        _put(
            env,
            reasons,
            "NCCL_NET_GDR_LEVEL",
            "0",
            f"{apus[0]} is an APU: no GPUDirect RDMA, RCCL stages through host memory",
        )
    elif cand.device.driver in SOFTWARE_RDMA_DRIVERS:
        _put(env, reasons, "NCCL_NET_GDR_LEVEL", "0", "software RDMA cannot reach GPU memory")


def _rate(port: RdmaPort) -> str:
    return "unknown rate" if port.rate_gbps is None else f"{port.rate_gbps:g} Gb/s"


# -- TCP plans --------------------------------------------------------------------------------
def _tcp_plan(inv: Inventory, wanted: str, peer: ipaddress.IPv4Address | None) -> TransportPlan:
    warnings: list[str] = []
    # Physical interfaces first; virtual ones (bonds, veths, bridges) only when they are all
    # there is, or when they are the ones on the peer's network.
    every = _ip_interfaces(inv, include_virtual=True)
    candidates = _ip_interfaces(inv) or every
    if wanted == "thunderbolt":
        candidates = [i for i in candidates if i.kind == "thunderbolt"]
        if not candidates:
            raise TransportError(
                "thunderbolt requested but no Thunderbolt network interface is up "
                "with an IPv4 address"
            )
    if peer is not None:
        pool = candidates if wanted == "thunderbolt" else every
        reaching = [i for i in pool if _network_address(i, peer)]
        if not reaching:
            if wanted == "thunderbolt":
                raise TransportError(
                    f"thunderbolt requested but no Thunderbolt interface reaches peer {peer}"
                )
            warnings.append(
                f"no interface is on the same network as peer {peer}; traffic will be routed"
            )
        candidates = reaching or candidates
    if not candidates:
        raise TransportError(
            "no network interface is up with an IPv4 address: nothing to carry traffic"
        )
    # Fastest first; Wi-Fi only when nothing wired is there; then by name.
    ordered = sorted(candidates, key=lambda i: (i.kind == "wireless", -(i.speed_mbps or 0), i.name))
    iface = ordered[0]
    if peer is None and len(ordered) > 1:
        warnings.extend(_others_warning(iface.name, [i.name for i in ordered[1:]]))
    transport = "thunderbolt" if iface.kind == "thunderbolt" else "ethernet"
    if wanted == "auto" and inv.rdma:
        warnings.append(
            f"running over TCP sockets although RDMA devices exist: {_why_no_rdma(inv)}"
        )
    address = _interface_address(iface, peer)
    env, reasons = _base_env(iface, address)
    _put(env, reasons, "NCCL_IB_DISABLE", "1", f"{transport} transport: TCP sockets only")
    _put(env, reasons, "NCCL_NET", "Socket", "use NCCL's socket transport explicitly")
    return TransportPlan(
        transport=transport,
        hca=None,
        gid_index=None,
        socket_ifname=iface.name,
        address=address,
        env=env,
        reasons={"transport": f"TCP over {iface.name} ({iface.kind})", **reasons},
        warnings=tuple(warnings),
    )


def _why_no_rdma(inv: Inventory) -> str:
    reasons = []
    for kind in RDMA_TRANSPORTS:
        usable = _usable(inv, kind, allow_software=False)
        for cand in _candidates(inv, kind):
            if cand.device.driver in SOFTWARE_RDMA_DRIVERS and cand.port.state == "ACTIVE":
                reasons.append(
                    f"{cand.label} is software RDMA, slower than TCP "
                    "(ask --transport roce to use it anyway)"
                )
            elif cand in usable:
                reasons.append(f"{cand.label} does not reach the peer")
            else:
                reasons.append(_why_unusable([cand]))
    return "; ".join(reasons) or "no port with a known link layer"


# -- shared -----------------------------------------------------------------------------------
def _ip_interfaces(inv: Inventory, include_virtual: bool = False) -> list[NetInterface]:
    """Interfaces that can carry IP traffic now: not down, with an IPv4 address; physical
    ones only unless ``include_virtual``."""
    skipped = ("loopback",) if include_virtual else ("loopback", "virtual")
    return [i for i in inv.net if i.kind not in skipped and i.ipv4 and i.state != "down"]


def _interface_address(
    iface: NetInterface | None, peer: ipaddress.IPv4Address | None
) -> str | None:
    if iface is None or not iface.ipv4:
        return None
    if peer is not None:
        on_net = _network_address(iface, peer)
        if on_net:
            return on_net
    return iface.ipv4[0].split("/")[0]


def _socket_interface(
    inv: Inventory,
    iface: NetInterface | None,
    peer: ipaddress.IPv4Address | None,
    warnings: list[str],
) -> NetInterface | None:
    """NCCL's bootstrap and Gloo need an IP interface: the RDMA port's own when it has an
    address (IPoIB for InfiniBand), else the one that reaches the peer."""
    if iface is not None and iface.ipv4:
        return iface
    others = _ip_interfaces(inv) or _ip_interfaces(inv, include_virtual=True)
    if peer is not None:
        reaching = [
            i for i in _ip_interfaces(inv, include_virtual=True) if _network_address(i, peer)
        ]
        others = reaching or others
    chosen = others[0] if others else None
    port_if = iface.name if iface else "the RDMA port"
    warnings.append(
        f"{port_if} has no IPv4 address; "
        f"bootstrap traffic uses {chosen.name if chosen else 'no interface'}"
    )
    return chosen


def _base_env(
    iface: NetInterface | None, address: str | None
) -> tuple[dict[str, str], dict[str, str]]:
    env: dict[str, str] = {}
    reasons: dict[str, str] = {}
    if iface is not None:
        _put(
            env,
            reasons,
            "NCCL_SOCKET_IFNAME",
            f"={iface.name}",
            "exact match (=): NCCL bootstrap and socket traffic on this interface only",
        )
        _put(
            env,
            reasons,
            "GLOO_SOCKET_IFNAME",
            iface.name,
            "torch.distributed Gloo on the same interface",
        )
    if address is not None:
        _put(
            env,
            reasons,
            "VLLM_HOST_IP",
            address,
            "vLLM and Ray advertise this node by its fabric address",
        )
    return env, reasons


def _put(env: dict[str, str], reasons: dict[str, str], name: str, value: str, reason: str) -> None:
    env[name] = value
    reasons[name] = reason
