"""Ray lifecycle: ``halo up`` / ``status`` / ``down``.

Every node gets the transport plan computed from its own facts, in the environment of its
``ray start`` (per node: HCA names and GID indexes differ). Remote work goes to ``bash -s``
on stdin: names, values and secrets never become argv of the SSH command.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from halo_cluster.checks import Finding
from halo_cluster.checks.cluster import cluster_checks
from halo_cluster.checks.context import NodeContext
from halo_cluster.checks.platform import node_checks
from halo_cluster.cluster.auth import ray_env
from halo_cluster.cluster.gather import NodeReport, gather
from halo_cluster.cluster.lifecycle_plan import (
    ENGINE_RESOURCE,
    REGISTER_TIMEOUT_S,
    START_TIMEOUT_S,
    expected_resources,
    node_env,
    node_script,
    parse_nodes,
    ray_command,
    registered,
    start_argv,
)
from halo_cluster.cluster.serve_plan import alive_script, local_host
from halo_cluster.cluster.state import (
    UpResult,
    read_state,
    state_path,
    update_state,
    write_state,
)
from halo_cluster.config import Config, NodeConfig, secret
from halo_cluster.errors import LifecycleError
from halo_cluster.runner.result import Result, Runner
from halo_cluster.runner.sharing import close_connections
from halo_cluster.transport import TransportPlan, plan_transport

# Older imports of these names from this module keep working.
__all__ = [
    "ENGINE_RESOURCE",
    "Lifecycle",
    "LifecycleError",
    "UpResult",
    "Waiter",
    "expected_resources",
    "node_env",
    "node_script",
    "parse_nodes",
    "ray_command",
    "read_state",
    "registered",
    "run_script",
    "start_argv",
    "state_path",
    "update_state",
    "write_state",
]


def run_script(
    runner: Runner,
    node: NodeConfig,
    env: Mapping[str, str],
    argv: list[str],
    timeout: float = START_TIMEOUT_S,
) -> Result:
    return runner.run(
        [*node.exec_prefix, "bash", "-s"], stdin=node_script(env, argv), timeout=timeout
    )


class Lifecycle:
    def __init__(
        self,
        config: Config,
        runners: Mapping[str, Runner],
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.runners = runners
        self.progress = progress or (lambda _m: None)
        self.gpus_found: dict[str, int] = {}  # per node, from its inventory (set by up)

    # -- facts ----------------------------------------------------------------------------
    def _gather(self) -> list[NodeReport]:
        self.progress("gathering facts and checking every node")
        return gather(self.config, self.runners)

    def blocking(self, reports: list[NodeReport]) -> list[tuple[str, Finding]]:
        found = [
            ("cluster", f)
            for f in cluster_checks(reports, self.config.transport)
            if f.severity == "fail"
        ]
        for report in reports:
            if report.inventory is None:
                continue
            ctx = NodeContext(
                report.inventory,
                self.config.transport,
                report.node.fabric_address,
                gpus=report.node.gpus != 0,
                ethtool=report.ethtool,
            )
            found += [(report.node.name, f) for f in node_checks(ctx) if f.severity == "fail"]
        return found

    def plans(self, reports: list[NodeReport]) -> dict[str, TransportPlan]:
        plans = {}
        for report in reports:
            assert report.inventory is not None
            peer = next(
                (
                    n.fabric_address
                    for n in self.config.nodes
                    if n.name != report.node.name and n.fabric_address
                ),
                None,
            )
            plans[report.node.name] = plan_transport(report.inventory, self.config.transport, peer)
        return plans

    def nodes_table(self) -> list[dict[str, Any]]:
        """Ray's node table as the head sees it (empty when the head is not running)."""
        head = self.config.head
        result = run_script(
            self.runners[head.name], head, ray_env(self.config), head.command("ray-nodes"), 60
        )
        return parse_nodes(result)

    def alive(self) -> list[str]:
        """Addresses of the nodes Ray reports alive (empty when the head is not running)."""
        return [n["address"] for n in self.nodes_table() if n.get("alive")]

    # -- up -------------------------------------------------------------------------------
    def up(self, force: bool = False) -> UpResult:
        reports = self._gather()
        missing = [r for r in reports if r.inventory is None]
        if missing:
            raise LifecycleError(
                "unreachable: " + "; ".join(f"{r.node.name} ({r.error})" for r in missing)
            )
        blocking = self.blocking(reports)
        if blocking and not force:
            shown = "; ".join(f"{node}: {f.check} {f.summary}" for node, f in blocking[:6])
            raise LifecycleError(
                f"{len(blocking)} blocking finding(s) (see 'halo doctor'; --force starts anyway): "
                f"{shown}"
            )
        contexts = {
            r.node.name: NodeContext(r.inventory, self.config.transport)
            for r in reports
            if r.inventory
        }
        result = UpResult(plans=self.plans(reports))
        self.gpus_found = {r.node.name: len(r.inventory.gpus) for r in reports if r.inventory}
        raylets = self.raylets()
        running = {n.address for n in self.config.nodes if raylets[n.name]}
        # no raylet anywhere: nothing to ask Ray
        alive = running & set(self.alive()) if running else set()
        head = self.config.head
        head_address = head.address
        waiter: Waiter | None = None
        for node in self.config.nodes:  # one after another: simultaneous joins race in Ray
            address = node.address
            if waiter is None and node is not head:
                # the head runs: its registration check starts now and overlaps the workers'
                waiter = Waiter(self)
            if address in alive:
                result.already.append(node.name)
                continue
            self.progress(f"starting Ray on {node.name} ({address})")
            env = {
                **node_env(node, result.plans[node.name], contexts[node.name]),
                **ray_env(self.config, create=True),
            }
            argv = start_argv(
                self.config,
                node,
                None if node is head else head_address,
                self.gpus_found.get(node.name, 0),
            )
            started = run_script(self.runners[node.name], node, env, argv)
            if not started.ok:
                if waiter is not None:
                    waiter.cancel()
                self.rollback(result.started)
                raise LifecycleError(
                    f"ray start on {node.name} failed: {started.error_text()}"
                    + (f"; stopped again: {', '.join(result.started)}" if result.started else "")
                )
            result.started.append(node.name)
        try:
            result.nodes_alive = (waiter or Waiter(self)).result() or self.wait_registered()
        except LifecycleError:
            self.rollback(result.started)
            raise
        result.ranks = {name: int(amount) for name, _kind, amount in self.wanted().values()}
        write_state(self.config, result)
        return result

    def wanted(self) -> dict[str, tuple[str, str, float]]:
        """address -> (node name, resource, amount) that registration must show."""
        return {
            n.address: (
                n.name,
                *expected_resources(n, self.gpus_found.get(n.name, 0)),
            )
            for n in self.config.nodes
        }

    def wait_registered(self, timeout_s: float = REGISTER_TIMEOUT_S) -> list[str]:
        """Names of the nodes once each is registered with its GPUs (CPUs without GPUs)."""
        wanted = self.wanted()
        deadline = time.monotonic() + timeout_s
        while True:
            done, missing = registered(self.nodes_table(), wanted)
            if not missing:
                return done
            if time.monotonic() > deadline:
                raise LifecycleError(
                    f"Ray did not register {', '.join(missing)} within {timeout_s:g} s"
                )
            self.progress("waiting for every node to register with Ray")
            time.sleep(0.25)

    def rollback(self, names: list[str]) -> None:
        """Stop what this run started, so a failed ``up`` leaves the cluster as it found it."""
        for node in reversed([n for n in self.config.nodes if n.name in names]):
            self.progress(f"rolling back: stopping Ray on {node.name}")
            self.stop_node(node)

    def stop_node(self, node: NodeConfig) -> Result:
        stop = [ray_command(self.config, node), "stop", "--force"]
        return run_script(self.runners[node.name], node, {}, stop, timeout=60)

    # -- status / down --------------------------------------------------------------------
    def raylets(self) -> dict[str, bool | None]:
        """Per node: is its raylet running (None: the node did not answer)? Ray itself notices
        a dead node only after its heartbeats time out; asking the node is immediate."""
        from concurrent.futures import ThreadPoolExecutor

        def check(node: NodeConfig) -> bool | None:
            result = self.runners[node.name].run(
                [*node.exec_prefix, "pgrep", "-f", "raylet"], timeout=15
            )
            return True if result.ok else False if result.returncode == 1 else None

        with ThreadPoolExecutor(max_workers=len(self.config.nodes)) as pool:
            return dict(
                zip(
                    [n.name for n in self.config.nodes],
                    pool.map(check, self.config.nodes),
                    strict=True,
                )
            )

    def status(self) -> dict[str, Any]:
        alive = set(self.alive())
        raylets = self.raylets()
        state = read_state(self.config) or {}
        nodes = []
        for node in self.config.nodes:
            address = node.address
            plan = state.get("nodes", {}).get(node.name, {}).get("plan", {})
            nodes.append(
                {
                    "name": node.name,
                    "address": address,
                    "ray": address in alive and bool(raylets[node.name]),
                    "reachable": raylets[node.name] is not None,
                    "transport": plan.get("transport"),
                    "hca": plan.get("hca"),
                }
            )
        started = state.get("started_at")
        return {
            "serve": self.serve_health(state.get("serve") or {}, nodes),
            "cluster": self.config.name,
            "head": self.config.head.name,
            "nodes": nodes,
            "up_s": round(time.time() - started, 1) if started and alive else None,
        }

    def serve_health(
        self, served: dict[str, Any], nodes: list[dict[str, Any]]
    ) -> dict[str, Any] | None:
        """The server's health, asked on the head, and the nodes its ranks run on: a lost
        node (unreachable, or its Ray gone) makes it unhealthy whatever /health says.
        None when no server was started and none is configured."""
        serve, head = self.config.serve, self.config.head
        if not served and not serve.model:
            return None
        host = served.get("host") or serve.host
        port = served.get("port") or serve.port
        local = local_host(host)
        argv = head.command("serve-health", "--host", local, "--port", str(port))
        env = {"HALO_SERVE_KEY": secret(serve.api_key_env) or ""}
        result = run_script(self.runners[head.name], head, env, argv, timeout=15)
        members = set(served.get("nodes") or [])
        if served.get("engine") == "llama.cpp":  # Ray plays no part: each worker's rpc-server
            lost = self._dead_servers([n for n in nodes if n["name"] in members], head.name)
        else:
            lost = [
                n["name"]
                for n in nodes
                if n["name"] in members and not (n["reachable"] and n["ray"])
            ]
        detail = result.stdout.strip() if result.ok else result.error_text()
        if lost:
            detail = f"lost {', '.join(lost)}" + ("" if result.ok else f"; {detail}")
        return {
            "endpoint": f"http://{local}:{port}",
            "healthy": result.ok and not lost,
            "detail": detail,
            "model": served.get("model") or serve.model,
            "executor": served.get("executor"),
            "engine": served.get("engine") or "vllm",
            "ranks": served.get("ranks", []),
            "proven": served.get("proven"),
            "lost": lost,
        }

    def _dead_servers(self, members: list[dict[str, Any]], head: str) -> list[str]:
        """The members (head excluded) that are unreachable or whose served program (the
        pid file 'halo serve' wrote) is gone."""
        script = alive_script(self.config.name)

        def dead(member: dict[str, Any]) -> bool:
            if not member["reachable"]:
                return True
            node = self.config.node(member["name"])
            runner = self.runners[node.name]
            return not runner.run([*node.exec_prefix, "bash", "-s"], stdin=script, timeout=8).ok

        workers = [m for m in members if m["name"] != head]
        with ThreadPoolExecutor(max_workers=max(1, len(workers))) as pool:
            flags = list(pool.map(dead, workers))
        return [m["name"] for m, gone in zip(workers, flags, strict=True) if gone]

    def down(self) -> dict[str, str]:
        """Stop Ray on every node (workers first); unreachable nodes are reported, not fatal."""
        outcome = {}
        for node in reversed(self.config.nodes):
            self.progress(f"stopping Ray on {node.name}")
            result = self.stop_node(node)
            outcome[node.name] = "stopped" if result.ok else f"failed: {result.error_text()}"
        # the shared SSH connections halo kept open to the nodes end with the cluster
        close_connections([n.ssh for n in self.config.nodes], self.config.ssh_config)
        return outcome


class Waiter:
    """``halo ray-nodes --wait`` on the head, in a thread: started as soon as the head runs, it
    pays its start-up (Python, Ray's client) while the workers start, then polls the GCS
    until every node is registered. ``result()``: the node names, or [] when it could not
    tell (the caller then asks Ray itself, as before)."""

    def __init__(self, lifecycle: Lifecycle) -> None:
        import threading

        self.lifecycle = lifecycle
        self.answer: Result | None = None
        self.thread = threading.Thread(target=self._run, name="halo-register", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        head = self.lifecycle.config.head
        wanted = ",".join(self.lifecycle.wanted())  # the addresses
        argv = head.command("ray-nodes", "--wait", wanted, "--timeout", f"{REGISTER_TIMEOUT_S:g}")
        env = ray_env(self.lifecycle.config, create=True)
        runner = self.lifecycle.runners[head.name]
        self.answer = run_script(runner, head, env, argv, REGISTER_TIMEOUT_S + 15)

    def result(self) -> list[str]:
        self.thread.join(REGISTER_TIMEOUT_S + 20)
        if self.answer is None:
            return []
        done, missing = registered(parse_nodes(self.answer), self.lifecycle.wanted())
        return [] if missing else done

    def cancel(self) -> None:
        """A start failed: end the remote wait now rather than at its timeout."""
        head = self.lifecycle.config.head
        self.lifecycle.runners[head.name].run(
            [*head.exec_prefix, "pkill", "-f", "ray-nodes --wait"], timeout=15
        )
