"""The doctor: node checks on every node, then the cluster checks. Returns findings only."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from halo_cluster.checks import Finding, rank, summarize, worst_first
from halo_cluster.checks.cluster import cluster_checks
from halo_cluster.checks.context import NodeContext, NodeReport
from halo_cluster.checks.node_code import check_node_python
from halo_cluster.checks.platform import node_checks
from halo_cluster.client.node import NodeClient
from halo_cluster.cluster.gather import gather
from halo_cluster.config import Config
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.jsonout import JsonObject
from halo_cluster.runner.local import LocalRunner
from halo_cluster.runner.result import Runner


@dataclass(frozen=True)
class DoctorReport:
    nodes: Mapping[str, list[Finding]]
    cluster: list[Finding]

    def all_findings(self) -> list[Finding]:
        return [f for findings in self.nodes.values() for f in findings] + list(self.cluster)

    def exit_code(self, strict: bool) -> int:
        worst = max((rank(f.severity) for f in self.all_findings()), default=0)
        return 1 if worst >= rank("fail") or (strict and worst >= rank("warn")) else 0

    def to_dict(self) -> JsonObject:
        return {
            "nodes": {
                name: {"findings": [f.to_dict() for f in worst_first(fs)]}
                for name, fs in self.nodes.items()
            },
            "cluster": {"findings": [f.to_dict() for f in worst_first(self.cluster)]},
            "summary": summarize(self.all_findings()),
        }


def doctor_local(
    root: str = "/", wanted: str = "auto", runner: Runner | None = None
) -> DoctorReport:
    """Check this node (or a fixture root). ``ethtool -i`` runs only for the live root."""
    inv = collect_inventory(root)
    ctx = NodeContext(inv, wanted)
    if root == "/" and ctx.fabric_iface is not None and (runner or shutil.which("ethtool")):
        result = (runner or LocalRunner()).run(["ethtool", "-i", ctx.fabric_iface.name], timeout=5)
        if result.ok:
            ctx = replace(ctx, ethtool={ctx.fabric_iface.name: result.stdout})
    return DoctorReport({inv.hostname or "local": node_checks(ctx)}, [])


def doctor_cluster(
    config: Config,
    clients: Mapping[str, NodeClient],
    names: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> DoctorReport:
    nodes = [config.node(name) for name in names] if names else list(config.nodes)
    reports = gather(config, clients, nodes, progress)
    per_node = {r.node.name: _node_findings(r, config.transport) for r in reports}
    return DoctorReport(per_node, cluster_checks(reports, config.transport, config.mesh()))


def _node_findings(report: NodeReport, wanted: str) -> list[Finding]:
    if report.python is not None:
        return [check_node_python(report)]  # reached, but halo's node code cannot run
    if report.inventory is None:
        return []  # reported once, as cluster.reachable
    return [check_node_python(report), *node_checks(NodeContext.of(report, wanted))]
