"""Ray's lifecycle: ``halo up`` / ``down``, and which nodes Ray has.

Every node's ``ray start`` runs with the transport plan made from its own facts
(``cluster.plans``: per node, HCA names and GID indexes differ). Remote work goes to
``bash -s`` on stdin: names, values and secrets never become argv of the SSH command.
"""

from __future__ import annotations

import secrets
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from halo_cluster.client.fanout import each
from halo_cluster.client.node import NodeClient
from halo_cluster.cluster.handle import Cluster
from halo_cluster.cluster.plans import make_plans
from halo_cluster.cluster.state import (
    ClusterState,
    NodeState,
    new_state,
    read_state,
    write_state,
)
from halo_cluster.config import NodeConfig
from halo_cluster.engines import scripts
from halo_cluster.errors import LifecycleError, StateError
from halo_cluster.ray.auth import ray_env
from halo_cluster.ray.start import (
    REGISTER_TIMEOUT_S,
    START_TIMEOUT_S,
    expected_resources,
    node_env,
    ray_command,
    ray_table,
    registered,
    start_argv,
)
from halo_cluster.runner.quote import node_script
from halo_cluster.runner.result import Result
from halo_cluster.runner.sharing import close_connections
from halo_cluster.transport import TransportPlan
from halo_cluster.wire.answers import RayNode
from halo_cluster.wire.args import ray_nodes_args


@dataclass
class UpResult:
    started: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    plans: dict[str, TransportPlan] = field(default_factory=dict)
    nodes_alive: list[str] = field(default_factory=list)
    ranks: dict[str, int] = field(default_factory=dict)  # engine ranks each node offers


def ray_start_path(cluster: str) -> str:
    """Where a node keeps the script that started its Ray (shell words: expands there)."""
    return f"{scripts.STATE_DIR}/ray-start-{shlex.quote(cluster)}.sh"


def keep_ray_start(client: NodeClient, cluster: str, script: str) -> None:
    """Keep the script that started Ray on the node (0600, its state directory: it may hold
    Ray's token), so that the supervisor on the head can start Ray there again after the
    node comes back (``halo down`` removes it)."""
    end = f"HALO_RAY_{secrets.token_hex(8)}"
    path = ray_start_path(cluster)
    client.script(
        f"set -e\numask 077\nmkdir -p {scripts.STATE_DIR}\ncat > {path} <<'{end}'\n{script}{end}\n",
        timeout=30,
    )


def run_script(
    client: NodeClient, env: Mapping[str, str], argv: list[str], timeout: float = START_TIMEOUT_S
) -> Result:
    return client.script(node_script(env, argv), timeout)


class Lifecycle:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.config = cluster.config
        self.progress = cluster.progress
        self.gpus_found: dict[str, int] = {}  # per node, from its inventory (set by up)

    def client(self, node: NodeConfig) -> NodeClient:
        return self.cluster.client(node)

    def nodes_table(self) -> tuple[RayNode, ...]:
        """Ray's node table as the head sees it (empty when the head is not running)."""
        head = self.client(self.config.head)
        return ray_table(head.call(*ray_nodes_args(), env=ray_env(self.config), timeout=60))

    def alive(self) -> list[str]:
        """Addresses of the nodes Ray reports alive (empty when the head is not running)."""
        return [n.address for n in self.nodes_table() if n.alive]

    # -- up -------------------------------------------------------------------------------
    def up(self, force: bool = False) -> UpResult:
        previous = read_state(self.config)  # a file halo cannot read stops it before Ray starts
        made = make_plans(self.cluster, force)
        result = UpResult(plans=made.plans)
        self.gpus_found = made.gpus_found()
        raylets = self.raylets()
        running = {n.address for n in self.config.nodes if raylets[n.name]}
        # no raylet anywhere: nothing to ask Ray
        alive = running & set(self.alive()) if running else set()
        head = self.config.head
        waiter: Waiter | None = None
        for node in self.config.nodes:  # one after another: simultaneous joins race in Ray
            if waiter is None and node is not head:
                # the head runs: its registration check starts now and overlaps the workers'
                waiter = Waiter(self)
            if node.address in alive:
                result.already.append(node.name)
                continue
            self.progress(f"starting Ray on {node.name} ({node.address})")
            env = {
                **node_env(
                    node, made.plans[node.name], made.context(node.name, self.config.transport)
                ),
                **ray_env(self.config, create=True),
            }
            argv = start_argv(
                self.config,
                node,
                None if node is head else head.address,
                self.gpus_found.get(node.name, 0),
            )
            script = node_script(env, argv)
            started = self.client(node).script(script, START_TIMEOUT_S)
            if started.ok:
                keep_ray_start(self.client(node), self.config.name, script)
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
        self._record(result, previous)
        return result

    def _record(self, result: UpResult, previous: ClusterState | None) -> None:
        """Every node's plan and ranks, and when Ray started (kept when it already ran)."""
        state = new_state(self.config)
        state.nodes = {
            name: NodeState(plan, result.ranks.get(name, 1)) for name, plan in result.plans.items()
        }
        state.ray_started_at = (previous.ray_started_at if previous else None) or time.time()
        if result.started:
            state.ray_started_at = time.time()
        state.serve = previous.serve if previous else None
        write_state(self.config, state)

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
        self.client(node).script(f"rm -f {ray_start_path(self.config.name)}\n", timeout=30)
        return run_script(self.client(node), {}, stop, timeout=60)

    # -- status / down --------------------------------------------------------------------
    def raylets(self, nodes: Sequence[NodeConfig] | None = None) -> dict[str, bool | None]:
        """Per node (default: every one): is its raylet running (None: the node did not
        answer)? Ray itself notices a dead node only after its heartbeats time out; asking
        the node is immediate."""

        def check(node: NodeConfig) -> bool | None:
            result = self.client(node).run(["pgrep", "-f", "raylet"], timeout=15)
            return True if result.ok else False if result.returncode == 1 else None

        chosen = list(self.config.nodes if nodes is None else nodes)
        return dict(zip([n.name for n in chosen], each(chosen, check), strict=True))

    def down(self) -> dict[str, str]:
        """Stop Ray on every node (workers first); unreachable nodes are reported, not fatal."""
        outcome = {}
        for node in reversed(self.config.nodes):
            self.progress(f"stopping Ray on {node.name}")
            result = self.stop_node(node)
            outcome[node.name] = "stopped" if result.ok else f"failed: {result.error_text()}"
        # the shared SSH connections halo kept open to the nodes end with the cluster
        close_connections([n.ssh for n in self.config.nodes], self.config.ssh_config)
        try:
            state = read_state(self.config)
        except StateError as err:  # Ray is down all the same; the file is the user's to fix
            self.progress(f"left the state file as it is: {err}")
            return outcome
        if state is not None and state.ray_started_at is not None:
            state.ray_started_at = None
            write_state(self.config, state)
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
        client = self.lifecycle.client(self.lifecycle.config.head)
        args = ray_nodes_args(list(self.lifecycle.wanted()), REGISTER_TIMEOUT_S)  # the addresses
        env = ray_env(self.lifecycle.config, create=True)
        self.answer = client.call(*args, env=env, timeout=REGISTER_TIMEOUT_S + 15)

    def result(self) -> list[str]:
        self.thread.join(REGISTER_TIMEOUT_S + 20)
        if self.answer is None:
            return []
        done, missing = registered(ray_table(self.answer), self.lifecycle.wanted())
        return [] if missing else done

    def cancel(self) -> None:
        """A start failed: end the remote wait now rather than at its timeout."""
        client = self.lifecycle.client(self.lifecycle.config.head)
        client.run(["pkill", "-f", "ray-nodes --wait"], timeout=15)
