"""Gather every node's inventory (and fabric reachability) in parallel, one client per node."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from halo_cluster.checks.context import NodeReport
from halo_cluster.client.fanout import each
from halo_cluster.client.node import NodeClient, escaped, first_bytes
from halo_cluster.config import Config, NodeConfig
from halo_cluster.facts.model import Inventory, inventory_from_dict
from halo_cluster.jsonin import loads
from halo_cluster.nodecode import problem
from halo_cluster.wire.args import inventory_args

INVENTORY_TIMEOUT_S = 30.0
PING_TIMEOUT_S = 5.0


def gather(
    config: Config,
    clients: Mapping[str, NodeClient],
    nodes: list[NodeConfig] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[NodeReport]:
    """Every chosen node's report, in the order of ``nodes`` (default: the config's)."""
    chosen = nodes if nodes is not None else list(config.nodes)
    return each(chosen, lambda node: _done(progress, _report(config, clients[node.name])))


def _report(config: Config, client: NodeClient) -> NodeReport:
    node = client.node
    result = client.call(*inventory_args(versions=True), timeout=INVENTORY_TIMEOUT_S)
    if not result.ok:
        found = problem(result.returncode, result.stderr) if node.halo is None else None
        if found is not None and found.kind != "code":  # reached, but cannot run halo there
            return NodeReport(node, None, found.detail, python=found)
        return NodeReport(node, None, f"{node.ssh}: {result.error_text()}")
    try:
        inv = inventory_from_dict(loads(result.stdout))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        # one line, whatever the node sent: the reason and the first bytes, escaped
        reason, shown = escaped(str(err), 120), first_bytes(result.stdout)
        message = f"{node.ssh}: unreadable inventory from {node.runs} ({reason}; got {shown})"
        return NodeReport(node, None, message)
    # on the host: the fabric is the machine's, not the container's
    pings = {
        peer.name: client.host_runner.run(
            ["ping", "-c", "1", "-W", "2", peer.fabric_address], timeout=PING_TIMEOUT_S
        ).ok
        for peer in config.nodes
        if peer.name != node.name and peer.fabric_address
    }
    return NodeReport(node, inv, None, pings, _ethtool(client, inv), code_sent=client.sent)


def _ethtool(client: NodeClient, inv: Inventory) -> dict[str, str] | None:
    """``ethtool -i`` of the fabric interface (on the host); None when ethtool is not there."""
    iface = inv.interface_with_address(client.node.fabric_address)
    if iface is None:
        return None
    result = client.host_runner.run(["ethtool", "-i", iface.name], timeout=PING_TIMEOUT_S)
    return {iface.name: result.stdout} if result.ok else None


def _done(progress: Callable[[str], None] | None, report: NodeReport) -> NodeReport:
    if progress is not None:
        progress(report.node.name)
    return report
