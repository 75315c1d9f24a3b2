"""One renderer per consumer of the typed fabric path: the NCCL/RCCL, Gloo and vLLM
environment, the path arguments of the node's ``counters`` command, perftest's device, port
and GID, and the label people read. Pure: the typed value in, what the consumer takes out."""

from __future__ import annotations

from dataclasses import dataclass

from halo_cluster.transport.path import RDMA_TRANSPORTS, Rail, TransportPlan
from halo_cluster.wire.args import counters_args as wire_counters_args


@dataclass(frozen=True)
class EnvWhy:
    """What the facts say that the rail alone does not: why this GID index, and why
    GPUDirect RDMA is off (None: NCCL decides)."""

    gid: str = ""
    gdr_off: str | None = None


def engine_env(transport: str, rail: Rail, why: EnvWhy) -> tuple[dict[str, str], dict[str, str]]:
    """The environment NCCL/RCCL, Gloo and vLLM need for ``rail``, and a reason per variable
    (the same names in the same order)."""
    env: dict[str, str] = {}
    reasons: dict[str, str] = {}
    if rail.netdev is not None:
        put_env(
            env,
            reasons,
            "NCCL_SOCKET_IFNAME",
            f"={rail.netdev}",
            "exact match (=): NCCL bootstrap and socket traffic on this interface only",
        )
        put_env(
            env,
            reasons,
            "GLOO_SOCKET_IFNAME",
            rail.netdev,
            "torch.distributed Gloo on the same interface",
        )
    if rail.address is not None:
        put_env(
            env,
            reasons,
            "VLLM_HOST_IP",
            rail.address,
            "vLLM and Ray advertise this node by its fabric address",
        )
    if transport in RDMA_TRANSPORTS:
        _rdma_env(rail, why, env, reasons)
    else:
        put_env(env, reasons, "NCCL_IB_DISABLE", "1", f"{transport} transport: TCP sockets only")
        put_env(env, reasons, "NCCL_NET", "Socket", "use NCCL's socket transport explicitly")
    return env, reasons


def routed_env(
    transport: str, rails: tuple[Rail, ...], identity: Rail, why: EnvWhy
) -> tuple[dict[str, str], dict[str, str]]:
    """The environment of a node on a routed fabric: NCCL/RCCL over every cable (``rails``),
    Gloo and vLLM on the identity, which the routes carry to every peer."""
    env: dict[str, str] = {}
    reasons: dict[str, str] = {}
    names = ",".join(r.netdev for r in rails if r.netdev)
    put_env(
        env,
        reasons,
        "NCCL_SOCKET_IFNAME",
        f"={names}",
        "exact match (=): NCCL's sockets on every cable, each reaching the peers routed over it",
    )
    if identity.netdev is not None:
        put_env(
            env,
            reasons,
            "GLOO_SOCKET_IFNAME",
            identity.netdev,
            f"Gloo binds one address: the identity {identity.address}, reached over any cable",
        )
    if identity.address is not None:
        put_env(
            env,
            reasons,
            "VLLM_HOST_IP",
            identity.address,
            "vLLM and Ray advertise this node by its identity address",
        )
    if transport in RDMA_TRANSPORTS:
        _rdma_env(rails[0], why, env, reasons)
        hcas = ",".join(r.hca for r in rails if r.hca)
        put_env(
            env,
            reasons,
            "NCCL_IB_HCA",
            f"={hcas}",
            "exact match (=): every cable's RDMA port is a rail",
        )
    else:
        put_env(env, reasons, "NCCL_IB_DISABLE", "1", f"{transport} transport: TCP sockets only")
        put_env(env, reasons, "NCCL_NET", "Socket", "use NCCL's socket transport explicitly")
    return env, reasons


def _rdma_env(rail: Rail, why: EnvWhy, env: dict[str, str], reasons: dict[str, str]) -> None:
    if rail.device is None or rail.hca is None or rail.gid_index is None:
        raise ValueError(f"an RDMA rail needs a device, a port and a GID index: {rail}")
    put_env(
        env, reasons, "NCCL_IB_DISABLE", "0", "RDMA is wanted: let NCCL use its IB/RoCE transport"
    )
    put_env(
        env,
        reasons,
        "NCCL_NET",
        "IB",
        "fail at start-up instead of falling back to sockets silently",
    )
    put_env(
        env,
        reasons,
        "NCCL_IB_HCA",
        f"={rail.hca}",
        f"exact match (=): {rail.device} must not also select {rail.device}0 etc.",
    )
    put_env(env, reasons, "NCCL_IB_GID_INDEX", str(rail.gid_index), why.gid)
    if why.gdr_off is not None:
        put_env(env, reasons, "NCCL_NET_GDR_LEVEL", "0", why.gdr_off)


def put_env(
    env: dict[str, str], reasons: dict[str, str], name: str, value: str, reason: str
) -> None:
    env[name] = value
    reasons[name] = reason


def counters_args(plan: TransportPlan, mgmt: str | None = None) -> list[str]:
    """The node's ``counters`` command for this plan's paths (``wire``): the fabric
    interface by its address (on a routed fabric, every cable by name: their bytes add up)
    and, on an RDMA plan, the planned port (``--rdma DEV:PORT``); ``mgmt``, the management
    address, when it is another interface."""
    rdma = None
    if plan.is_rdma and plan.device is not None and plan.port is not None:
        rdma = (plan.device, plan.port)
    shown_mgmt = mgmt if mgmt and mgmt != plan.address else None
    if plan.identity is not None:
        links = [r.netdev for r in plan.rails if r.netdev]
        return wire_counters_args(mgmt=shown_mgmt, rdma=rdma, links=links)
    return wire_counters_args(fabric=plan.address, mgmt=shown_mgmt, rdma=rdma)


@dataclass(frozen=True)
class PerftestDevice:
    """perftest's ``-d DEVICE -i PORT -x GID_INDEX``."""

    device: str
    port: int | None
    gid_index: int | None


def perftest_device(plan: TransportPlan) -> PerftestDevice | None:
    """What perftest (``bench net``, the exporter's RDMA probe) runs on for ``plan``; None
    when the plan has no RDMA device."""
    if not plan.is_rdma or plan.device is None:
        return None
    return PerftestDevice(plan.device, plan.port, plan.gid_index)


def rail_label(plan: TransportPlan) -> str | None:
    """What people read as the path: ``dev:port`` of an RDMA plan, else its IP interface;
    every cable of a routed fabric's plan."""
    if plan.identity is not None:
        return "+".join(r.hca or r.netdev or "?" for r in plan.rails)
    return plan.rail.hca or plan.netdev
