"""The two witnesses of where a running server's traffic went, gathered from the nodes:

1. the engine's own words — NCCL/RCCL's debug log (``nccl_log``) or vLLM's Gloo start-up
   lines (``engine_log``), checked against each node's plan;
2. the counters — each node's fabric and management interfaces (and RDMA port) read
   before and after one probe request, as bytes per generated token (``traffic``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from halo_cluster.cluster.lifecycle import run_script
from halo_cluster.config import NodeConfig
from halo_cluster.engine_log import EngineVerdict, check_ranks, parse_engine_logs
from halo_cluster.facts.model import PathCounters
from halo_cluster.nccl_log import LogVerdict, parse_logs
from halo_cluster.runner.result import Runner
from halo_cluster.traffic import check_paths, per_token
from halo_cluster.transport import TransportPlan


def rdma_port(plan: TransportPlan) -> tuple[str, int] | None:
    """(HCA, port) of an RDMA plan, from its NCCL_IB_HCA (``=rocep194s0:1``)."""
    if not plan.is_rdma or not plan.hca:
        return None
    value = plan.env.get("NCCL_IB_HCA", "").lstrip("=^")
    _name, _, port = value.partition(":")
    return plan.hca, int(port) if port.isdigit() else 1


def mgmt_address(node: NodeConfig) -> str | None:
    """The node's management address: configured, else its SSH host when that is an IP."""
    import ipaddress

    if node.mgmt_address:
        return node.mgmt_address
    try:
        return str(ipaddress.ip_address(node.host))
    except ValueError:
        return None


def counters_argv(node: NodeConfig, plan: TransportPlan) -> list[str]:
    argv = node.command("counters")
    if plan.address:
        argv += ["--fabric", plan.address]
    mgmt = mgmt_address(node)
    if mgmt and mgmt != plan.address:
        argv += ["--mgmt", mgmt]
    port = rdma_port(plan)
    if port:
        argv += ["--rdma", f"{port[0]}:{port[1]}"]
    return argv


def parse_counters(stdout: str) -> dict[str, PathCounters]:
    """``halo counters`` output -> path -> counters ({} for anything unreadable)."""
    try:
        data = json.loads(stdout)
        paths = data["paths"]
        return {
            name: PathCounters(str(v["name"]), _int(v.get("rx_bytes")), _int(v.get("tx_bytes")))
            for name, v in paths.items()
            if isinstance(v, dict)
        }
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_counters(
    runners: Mapping[str, Runner], nodes: list[NodeConfig], plans: Mapping[str, TransportPlan]
) -> dict[str, dict[str, PathCounters]]:
    """Every node's path counters, read in parallel."""

    def one(node: NodeConfig) -> dict[str, PathCounters]:
        result = run_script(runners[node.name], node, {}, counters_argv(node, plans[node.name]), 30)
        return parse_counters(result.stdout) if result.ok else {}

    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
        return dict(zip([n.name for n in nodes], pool.map(one, nodes), strict=True))


def traffic_witness(
    before: Mapping[str, Mapping[str, PathCounters]],
    after: Mapping[str, Mapping[str, PathCounters]],
    tokens: int,
    rdma_planned: bool,
) -> dict[str, Any]:
    nodes = {name: per_token(before[name], after.get(name, {}), tokens) for name in before}
    return {
        "tokens": tokens,
        "nodes": nodes,
        "problems": check_paths(nodes, rdma_planned),
    }


def engine_witness(
    logs: list[tuple[str, str | None, str]],
    head_address: str | None,
    addresses: Mapping[str, str],
) -> tuple[EngineVerdict, LogVerdict, list[str]]:
    """(vLLM's verdict, NCCL's verdict, problems with where the ranks met and ran)."""
    engine = parse_engine_logs((name, node, text.splitlines()) for name, node, text in logs)
    nccl = parse_logs([(name, text.splitlines()) for name, _node, text in logs])
    problems = check_ranks(engine, head_address, addresses, head_address)
    return engine, nccl, problems
