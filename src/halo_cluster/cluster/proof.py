"""The counters witness of where a running server's traffic went, the same for every
engine: each node's fabric and management interfaces (and RDMA port) read before and after
one probe request, as bytes per generated token (``traffic``). The other witness, the
engine's own words, is each engine's (``Engine.witness``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from halo_cluster.client.fanout import each
from halo_cluster.client.node import NodeClient
from halo_cluster.config import NodeConfig
from halo_cluster.facts.model import PathCounters
from halo_cluster.runner.quote import node_script
from halo_cluster.traffic import check_paths, per_token
from halo_cluster.transport import TransportPlan
from halo_cluster.transport.render import counters_args


def mgmt_address(node: NodeConfig) -> str | None:
    """The node's management address: configured, else its SSH host when that is an IP."""
    import ipaddress

    if node.mgmt_address:
        return node.mgmt_address
    try:
        return str(ipaddress.ip_address(node.host))
    except ValueError:
        return None


def counters_call(node: NodeConfig, plan: TransportPlan) -> list[str]:
    """The node's ``counters`` command and its arguments: the plan's paths
    (``transport.render``) and the node's management address."""
    argv = ["counters", *counters_args(plan)]
    mgmt = mgmt_address(node)
    if mgmt and mgmt != plan.address:
        argv += ["--mgmt", mgmt]
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
    clients: Mapping[str, NodeClient],
    nodes: list[NodeConfig],
    plans: Mapping[str, TransportPlan],
) -> dict[str, dict[str, PathCounters]]:
    """Every node's path counters, read in parallel ({} for a node that did not answer)."""

    def one(node: NodeConfig) -> dict[str, PathCounters]:
        client = clients[node.name]
        argv = client.command(*counters_call(node, plans[node.name]))
        result = client.script(node_script({}, argv), 30)
        return parse_counters(result.stdout) if result.ok else {}

    return dict(zip([n.name for n in nodes], each(nodes, one), strict=True))


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
