"""Every node's transport plan and the doctor's gate, from one place and without Ray:
``halo up`` starts Ray with these plans, ``halo serve`` hands them to an engine that does
not use Ray (llama.cpp, vLLM's mp executor), the benchmarks stamp their results with them.

Each node's plan is computed from its own facts (HCA names and GID indexes differ between
nodes), towards the first other node's fabric address."""

from __future__ import annotations

from dataclasses import dataclass

from halo_cluster.checks import Finding
from halo_cluster.checks.cluster import cluster_checks
from halo_cluster.checks.context import NodeContext, NodeReport
from halo_cluster.checks.platform import node_checks
from halo_cluster.cluster.gather import gather
from halo_cluster.cluster.handle import Cluster
from halo_cluster.config import Config
from halo_cluster.errors import LifecycleError
from halo_cluster.transport import TransportPlan, plan_transport


@dataclass(frozen=True)
class ClusterPlans:
    """The facts behind the plans, the plans, and the engine ranks each node offers."""

    reports: list[NodeReport]
    plans: dict[str, TransportPlan]
    capacity: dict[str, int]

    def context(self, name: str, transport: str) -> NodeContext:
        report = next(r for r in self.reports if r.node.name == name)
        assert report.inventory is not None
        return NodeContext(report.inventory, transport)

    def gpus_found(self) -> dict[str, int]:
        return {r.node.name: len(r.inventory.gpus) for r in self.reports if r.inventory}


def make_plans(cluster: Cluster, force: bool = False) -> ClusterPlans:
    """Gather every node's facts, refuse on the doctor's blocking findings (unless ``force``)
    and plan every node; an unreachable node is a LifecycleError naming it."""
    config = cluster.config
    cluster.progress("gathering facts and checking every node")
    reports = gather(config, cluster.clients)
    missing = [r for r in reports if r.inventory is None]
    if missing:
        raise LifecycleError(
            "unreachable: " + "; ".join(f"{r.node.name} ({r.error})" for r in missing)
        )
    found = blocking(config, reports)
    if found and not force:
        shown = "; ".join(f"{node}: {f.check} {f.summary}" for node, f in found[:6])
        raise LifecycleError(
            f"{len(found)} blocking finding(s) (see 'halo doctor'; --force starts anyway): {shown}"
        )
    plans = plan_nodes(config, reports)
    capacity = {
        r.node.name: r.node.gpus_used(len(r.inventory.gpus)) or 1  # a CPU node: one rank
        for r in reports
        if r.inventory is not None
    }
    return ClusterPlans(reports, plans, capacity)


def blocking(config: Config, reports: list[NodeReport]) -> list[tuple[str, Finding]]:
    """The doctor's failing findings: (node or "cluster", finding)."""
    checks = cluster_checks(reports, config.transport, config.mesh())
    found = [("cluster", f) for f in checks if f.severity == "fail"]
    for report in reports:
        if report.inventory is None:
            continue
        ctx = NodeContext.of(report, config.transport)
        found += [(report.node.name, f) for f in node_checks(ctx) if f.severity == "fail"]
    return found


def plan_nodes(config: Config, reports: list[NodeReport]) -> dict[str, TransportPlan]:
    """Each reachable node's plan, towards the first other node's fabric address (on a
    routed fabric: over its cables, bound to its identity)."""
    plans = {}
    mesh = config.mesh()
    for report in reports:
        if report.inventory is not None and mesh is not None:
            fabric = mesh.node(report.node.name)
            plans[report.node.name] = plan_transport(
                report.inventory, config.transport, None, fabric
            )
            continue
        if report.inventory is None:
            continue
        peer = next(
            (
                n.fabric_address
                for n in config.nodes
                if n.name != report.node.name and n.fabric_address
            ),
            None,
        )
        plans[report.node.name] = plan_transport(report.inventory, config.transport, peer)
    return plans
