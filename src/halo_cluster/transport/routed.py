"""The plan of a node on a routed fabric (cabled point to point: a USB4 mesh or ring): one
rail per cable, and the node's identity (its own interface and /32) for what binds one
address. NCCL/RCCL get every cable (``NCCL_SOCKET_IFNAME`` as a list; on RDMA, every
cable's port as ``NCCL_IB_HCA``); Gloo, vLLM, Ray and llama.cpp's RPC get the identity,
which the routes carry to every other node over the right cable."""

from __future__ import annotations

import ipaddress

from halo_cluster.errors import TransportError
from halo_cluster.facts.model import Inventory
from halo_cluster.mesh import NodeFabric
from halo_cluster.transport.choose import usable_ports
from halo_cluster.transport.env import apu_names, require_name
from halo_cluster.transport.path import RDMA_TRANSPORTS, Candidate, Rail, TransportPlan
from halo_cluster.transport.rdma import gdr_off, roce_gid
from halo_cluster.transport.render import EnvWhy, put_env, routed_env


def routed_plan(inv: Inventory, wanted: str, fabric: NodeFabric) -> TransportPlan:
    """Raise TransportError when ``wanted`` cannot run over this node's cables."""
    for link in fabric.links:
        require_name(link.ifname, f"the cable to {link.peer}")
    require_name(fabric.identity_iface, "the identity interface")
    warnings: list[str] = []
    ifaces = {link.ifname: inv.interface(link.ifname) for link in fabric.links}
    kinds = {name: iface.kind if iface is not None else None for name, iface in ifaces.items()}
    ports = _ports(inv, wanted, fabric)
    if wanted in RDMA_TRANSPORTS or (
        wanted == "auto" and ports and len(ports) == len(fabric.links)
    ):
        kind = wanted if wanted in RDMA_TRANSPORTS else ports[fabric.links[0].ifname].kind
        rails, gid_why = _rdma_rails(inv, fabric, ports, kind, warnings)
        transport = kind
    else:
        present = {name: k for name, k in kinds.items() if k is not None}
        if wanted == "thunderbolt":
            other = [name for name, k in present.items() if k != "thunderbolt"]
            if other:
                raise TransportError(
                    f"thunderbolt requested but {', '.join(other)} "
                    "is not a Thunderbolt network interface"
                )
        rails = tuple(Rail(netdev=link.ifname, address=link.ip) for link in fabric.links)
        # the cables that are there say what kind of link they are (a missing one is the
        # doctor's to name, not a reason to call the fabric Ethernet)
        thunderbolt = wanted == "thunderbolt" or set(present.values()) == {"thunderbolt"}
        transport = "thunderbolt" if thunderbolt else "ethernet"
        gid_why = ""
    missing = [name for name, k in kinds.items() if k is None]
    if missing:
        warnings.append(f"{', '.join(missing)} not present: see 'halo doctor' (fabric.link)")
    identity = Rail(netdev=fabric.identity_iface, address=fabric.identity)
    apus = apu_names(inv)
    gdr = None
    if transport in RDMA_TRANSPORTS:
        first = ports[fabric.links[0].ifname]
        gdr = gdr_off(first, apus)
    env, reasons = routed_env(transport, rails, identity, EnvWhy(gid_why, gdr))
    if transport not in RDMA_TRANSPORTS and inv.rdma and wanted == "auto":
        warnings.append("running over TCP sockets: not every cable has a usable RDMA port")
    put_env(
        env,
        reasons,
        "NCCL_CROSS_NIC",
        "1",
        "each cable reaches other peers: a ring may cross from one cable to another",
    )
    cables = ", ".join(f"{link.ifname} to {link.peer}" for link in fabric.links)
    return TransportPlan(
        transport=transport,
        rails=rails,
        apu=bool(apus),
        env=env,
        reasons={
            "transport": f"{transport} over {len(rails)} cable(s) ({cables}), "
            f"identity {fabric.identity} on {fabric.identity_iface}",
            **reasons,
        },
        warnings=tuple(warnings),
        identity=identity,
    )


def _ports(inv: Inventory, wanted: str, fabric: NodeFabric) -> dict[str, Candidate]:
    """The usable RDMA port on each cable (by interface), of the wanted kind (auto: hardware
    RDMA of either kind)."""
    kinds = (wanted,) if wanted in RDMA_TRANSPORTS else RDMA_TRANSPORTS if wanted == "auto" else ()
    found: dict[str, Candidate] = {}
    for kind in kinds:
        for cand in usable_ports(inv, kind, allow_software=wanted != "auto"):
            if cand.port.netdev in fabric.ifnames and cand.port.netdev not in found:
                found[cand.port.netdev] = cand
    return found


def _rdma_rails(
    inv: Inventory,
    fabric: NodeFabric,
    ports: dict[str, Candidate],
    kind: str,
    warnings: list[str],
) -> tuple[tuple[Rail, ...], str]:
    lacking = [link.ifname for link in fabric.links if link.ifname not in ports]
    if lacking:
        raise TransportError(
            f"{kind} requested but {', '.join(lacking)} has no usable {kind} port: every "
            "cable needs one (or ask for a TCP transport)"
        )
    rails, whys = [], []
    for link in fabric.links:
        cand = ports[link.ifname]
        if kind == "infiniband":
            gid_index, why = 0, "InfiniBand ports address by LID; GID 0 holds the port GUID"
        else:
            # the GID of the cable's own address: the far end's is on its /31
            peer = ipaddress.IPv4Address(link.peer_address)
            gid_index, _, why = roce_gid(cand, inv.interface(link.ifname), peer, warnings)
        whys.append(why)
        rails.append(Rail(cand.device.name, cand.port.port, gid_index, link.ifname, link.ip))
    if len({r.gid_index for r in rails}) > 1:
        warnings.append(
            "the cables' RoCE v2 GID indexes differ; NCCL_IB_GID_INDEX takes one: "
            f"{rails[0].gid_index} (of {rails[0].hca})"
        )
    return tuple(rails), "; ".join(whys)
