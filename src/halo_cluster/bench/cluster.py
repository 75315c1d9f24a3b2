"""What every cluster benchmark starts from: the config, a client per node, each node's
facts and its own transport plan, and the stamp that goes into every result."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from halo_cluster.bench.events import read_events
from halo_cluster.bench.net_legs import interface_for
from halo_cluster.bench.remote import RemoteJobs
from halo_cluster.bounded.jsonin import loads
from halo_cluster.checks.context import NodeReport
from halo_cluster.client.node import NodeClient, ssh_clients
from halo_cluster.cluster.gather import gather
from halo_cluster.config import Config, find_config, load_config
from halo_cluster.errors import BenchError, BenchInterrupted, NodeLost, UsageError
from halo_cluster.facts.model import Inventory
from halo_cluster.jsonout import JsonObject
from halo_cluster.ray.auth import ray_env
from halo_cluster.transport import TransportPlan
from halo_cluster.wire.args import bench_driver_args
from halo_cluster.wire.commands import BENCH_SPEC_ENV


@dataclass
class BenchCluster:
    config: Config
    clients: Mapping[str, NodeClient]
    reports: list[NodeReport]
    plans: dict[str, TransportPlan]

    @property
    def inventories(self) -> dict[str, Inventory | None]:
        return {r.node.name: r.inventory for r in self.reports}

    def plan_dicts(self) -> JsonObject:
        return {name: plan.to_dict() for name, plan in self.plans.items()}

    def stamp(self) -> JsonObject:
        """Per node: host name, the plan (transport, RDMA device and port, GID, interface, MTU,
        addresses)
        and versions — what a result needs to be read a year later."""
        nodes: JsonObject = {}
        for report in self.reports:
            node, inv = report.node, report.inventory
            plan = self.plans.get(node.name)
            iface = interface_for(inv, plan.address) if (plan and plan.address) else None
            nodes[node.name] = {
                "hostname": inv.hostname if inv else None,
                "transport": plan.transport if plan else None,
                "hca": plan.rail.hca if plan else None,
                "device": plan.device if plan else None,
                "port": plan.port if plan else None,
                "gid_index": plan.gid_index if plan else None,
                "socket_ifname": plan.netdev if plan else None,
                "mtu": iface.mtu if iface else None,
                "fabric_address": node.fabric_address,
                "mgmt_address": node.mgmt_address or node.host,
                "versions": dict(inv.versions) if inv else {},
            }
        return nodes


def prepare(
    config_path: str | None,
    progress: Callable[[str], None],
    clients: Mapping[str, NodeClient] | None = None,
    config: Config | None = None,
) -> BenchCluster:
    """Load the config, gather every node's facts and plan; a node that does not answer is a
    one-line error naming it."""
    from halo_cluster.cluster.plans import plan_nodes

    if config is None:
        path = find_config(config_path)
        if path is None:
            raise UsageError("no cluster config: pass --config halo.toml (halo lab up writes one)")
        config = load_config(path)
    clients = clients or ssh_clients(config)
    progress(f"gathering facts from {len(config.nodes)} node(s)")
    reports = gather(config, clients)
    lost = [r for r in reports if r.inventory is None]
    if lost:
        raise NodeLost("; ".join(f"{r.node.name} does not answer ({r.error})" for r in lost))
    plans = plan_nodes(config, reports)
    return BenchCluster(config, clients, reports, plans)


def drive_remote(
    cluster: BenchCluster,
    spec: dict[str, object],
    limit_s: float,
    progress: Callable[[str], None],
) -> dict[str, object]:
    """Run ``halo bench-driver`` on the head with ``spec``; its result body. Progress lines
    are shown as they come; Ctrl-C or a failure stops the driver (and so its ranks)."""
    head = cluster.config.head
    client = cluster.clients[head.name]
    jobs = RemoteJobs(cluster.clients)
    spec = {**spec, "run_id": jobs.run_id}

    rows: list[object] = []

    def on_line(line: str) -> None:
        try:
            event = loads(line)
        except ValueError:
            return
        if isinstance(event, dict) and event.get("event") == "progress":
            progress(str(event.get("message")))
        elif isinstance(event, dict) and event.get("event") == "row":
            rows.append(event.get("row"))

    try:
        done = jobs.run(
            head,
            "driver",
            client.command(*bench_driver_args()),
            limit_s,
            env={BENCH_SPEC_ENV: json.dumps(spec), **ray_env(cluster.config)},
            on_line=on_line,
        )
    except KeyboardInterrupt as interrupt:
        raise BenchInterrupted(rows) from interrupt
    finally:
        jobs.cleanup()
    result, error = read_events(done.stdout.splitlines())
    if result is not None:
        return result
    if error is None:
        answer = client.run(["true"], timeout=10)
        if not answer.ok:
            error = f"lost the head {head.name}: {answer.error_text()}"
        elif done.returncode == 124:
            error = f"the run did not finish within {limit_s:g} s"
        else:
            error = f"bench driver on {head.name}: {done.error_text()}"
    failure = BenchError(error, rows)
    raise failure
