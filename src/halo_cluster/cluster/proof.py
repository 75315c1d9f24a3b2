"""The counters witness of where a running server's traffic went, the same for every
engine: each node's fabric and management interfaces (and RDMA port) read before and after
one probe request, as bytes per generated token (``witness.traffic``). The other witness, the
engine's own words, is each engine's (``Engine.witness``)."""

from __future__ import annotations

from collections.abc import Mapping

from halo_cluster.client.fanout import each
from halo_cluster.client.node import NodeClient
from halo_cluster.config import NodeConfig
from halo_cluster.errors import WireError
from halo_cluster.facts.model import PathCounters
from halo_cluster.jsonout import JsonObject
from halo_cluster.transport import TransportPlan
from halo_cluster.transport.render import counters_args
from halo_cluster.wire.answers import parse_counters
from halo_cluster.witness.traffic import check_paths, per_token


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
    return counters_args(plan, mgmt_address(node))


def read_paths(stdout: str) -> dict[str, PathCounters]:
    """``counters`` output -> path -> counters ({} for an answer halo cannot read: that
    node's witness then says its counters could not be read)."""
    try:
        return dict(parse_counters(stdout).paths)
    except WireError:
        return {}


def read_counters(
    clients: Mapping[str, NodeClient],
    nodes: list[NodeConfig],
    plans: Mapping[str, TransportPlan],
) -> dict[str, dict[str, PathCounters]]:
    """Every node's path counters, read in parallel ({} for a node that did not answer)."""

    def one(node: NodeConfig) -> dict[str, PathCounters]:
        result = clients[node.name].call(*counters_call(node, plans[node.name]), timeout=30)
        return read_paths(result.stdout) if result.ok else {}

    return dict(zip([n.name for n in nodes], each(nodes, one), strict=True))


def traffic_witness(
    before: Mapping[str, Mapping[str, PathCounters]],
    after: Mapping[str, Mapping[str, PathCounters]],
    tokens: int,
    rdma_planned: bool,
) -> JsonObject:
    nodes = {name: per_token(before[name], after.get(name, {}), tokens) for name in before}
    return {
        "tokens": tokens,
        "nodes": nodes,
        "problems": check_paths(nodes, rdma_planned),
    }
