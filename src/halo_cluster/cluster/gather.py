"""Gather every node's inventory (and fabric reachability) in parallel over its Runner."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from halo_cluster.checks.context import NodeReport as NodeReport  # defined with the checks
from halo_cluster.config import Config, NodeConfig, halo_node_code
from halo_cluster.facts.model import Inventory, inventory_from_dict
from halo_cluster.nodecode import problem
from halo_cluster.noderunner import NodeRunner
from halo_cluster.runner import Runner, SSHRunner

INVENTORY_TIMEOUT_S = 30.0
PING_TIMEOUT_S = 5.0


def ssh_runners(config: Config) -> dict[str, Runner]:
    """One Runner per node: SSH, sending halo's node code where no halo is configured."""
    return {n.name: node_runner(n, SSHRunner(n.ssh, config.ssh_config)) for n in config.nodes}


def node_runner(node: NodeConfig, inner: Runner) -> NodeRunner:
    code = None if node.halo else halo_node_code()
    return NodeRunner(inner, node.exec_prefix, node.python, code)


def gather(
    config: Config,
    runners: Mapping[str, Runner],
    nodes: list[NodeConfig] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[NodeReport]:
    chosen = nodes if nodes is not None else list(config.nodes)
    with ThreadPoolExecutor(max_workers=max(1, len(chosen))) as pool:
        futures = [
            pool.submit(_gather_node, config, node, runners[node.name], progress) for node in chosen
        ]
        return [future.result() for future in futures]


def _gather_node(
    config: Config, node: NodeConfig, runner: Runner, progress: Callable[[str], None] | None
) -> NodeReport:
    argv = [*node.exec_prefix, *node.command("inventory", "--json", "--versions")]
    result = runner.run(argv, timeout=INVENTORY_TIMEOUT_S)
    if not result.ok:
        found = problem(result.returncode, result.stderr) if node.halo is None else None
        if found is not None and found.kind != "code":  # reached, but cannot run halo there
            return _done(progress, NodeReport(node, None, found.detail, python=found))
        return _done(progress, NodeReport(node, None, f"{node.ssh}: {result.error_text()}"))
    try:
        inv = inventory_from_dict(json.loads(result.stdout))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
        # one line, whatever the node sent: the reason and the first bytes, escaped
        shown = ascii(result.stdout[:60])
        reason = ascii(str(err)[:120])[1:-1]
        message = f"{node.ssh}: unreadable inventory from {node.runs} ({reason}; got {shown})"
        return _done(progress, NodeReport(node, None, message))
    pings = {
        peer.name: runner.run(
            ["ping", "-c", "1", "-W", "2", peer.fabric_address], timeout=PING_TIMEOUT_S
        ).ok
        for peer in config.nodes
        if peer.name != node.name and peer.fabric_address
    }
    sent = isinstance(runner, NodeRunner) and runner.sent
    report = NodeReport(node, inv, None, pings, _ethtool(runner, inv, node), code_sent=sent)
    return _done(progress, report)


def _ethtool(runner: Runner, inv: Inventory, node: NodeConfig) -> dict[str, str] | None:
    """``ethtool -i`` of the fabric interface; None when ethtool is not there."""
    iface = inv.interface_with_address(node.fabric_address)
    if iface is None:
        return None
    result = runner.run(["ethtool", "-i", iface.name], timeout=PING_TIMEOUT_S)
    return {iface.name: result.stdout} if result.ok else None


def _done(progress: Callable[[str], None] | None, report: NodeReport) -> NodeReport:
    if progress is not None:
        progress(report.node.name)
    return report
