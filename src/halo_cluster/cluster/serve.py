"""``halo serve``: vLLM tensor-parallel across the cluster, started in the background with
its log in a known file on each node, then proven: healthy only when the engine's own
log and the nodes' counters agree that the traffic took the planned path.

Executors:
- ``ray``: one ``vllm serve`` on the head, its ranks Ray actors placed on the nodes (GPUs,
  or the engine resource ``halo up`` declares on CPU-only nodes);
- ``mp``: vLLM's own multi-node executor, one process per node, each started with its
  own node's plan (``--nnodes/--node-rank``; the others ``--headless``).

Secrets (the API key, HF_TOKEN) reach vLLM through the environment of the script fed to
``bash -s`` — vLLM reads ``VLLM_API_KEY`` as its ``--api-key`` — never through argv, logs,
state or JSON.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar

from halo_cluster.cluster import proof
from halo_cluster.cluster.auth import ray_env
from halo_cluster.cluster.lifecycle import (
    Lifecycle,
    LifecycleError,
    node_script,
    read_state,
    update_state,
)
from halo_cluster.cluster.serve_plan import (
    PREFLIGHT,
    Placement,
    alive_script,
    background_script,
    is_local_model,
    local_host,
    log_paths,
    placement,
    preflight_script,
    serve_argv,
    stop_script,
)
from halo_cluster.cluster.serve_result import Launch, ServeResult, state_summary
from halo_cluster.config import Config, NodeConfig, ServeConfig, secret
from halo_cluster.engine_log import rank_nodes
from halo_cluster.errors import UsageError
from halo_cluster.runner.result import Result
from halo_cluster.transport import TransportPlan

HEALTH_TIMEOUT_S = 900.0
WARMUP_TOKENS = 4
PROBE_TOKENS = 64
T = TypeVar("T")
__all__ = ["HEALTH_TIMEOUT_S", "PROBE_TOKENS", "Launch", "ServeResult", "Server"]
MP_MASTER_PORT = 29517


class Server:
    def __init__(self, lifecycle: Lifecycle, progress: Callable[[str], None] | None = None) -> None:
        self.lifecycle = lifecycle
        self.config: Config = lifecycle.config
        self.head: NodeConfig = self.config.head
        self.runner = lifecycle.runners[self.head.name]
        self.progress = progress or (lambda _m: None)

    # -- helpers --------------------------------------------------------------------------
    def _plans(self) -> dict[str, TransportPlan]:
        state = read_state(self.config) or {}
        return {
            name: TransportPlan.from_dict(entry["plan"])
            for name, entry in state.get("nodes", {}).items()
            if entry.get("plan")
        }

    def _capacity(self) -> dict[str, int]:
        state = read_state(self.config) or {}
        return {name: int(e.get("ranks", 1)) for name, e in state.get("nodes", {}).items()}

    def _run(self, node: NodeConfig, script: str, timeout: float = 60.0) -> Result:
        return self.lifecycle.runners[node.name].run(
            [*node.exec_prefix, "bash", "-s"], stdin=script, timeout=timeout
        )

    def _each(self, items: Sequence[T], work: Callable[[T], Any]) -> list[Any]:
        """``work`` on every item (nodes, workers) in parallel, results in order."""
        with ThreadPoolExecutor(max_workers=max(1, len(items))) as pool:
            return list(pool.map(work, items))

    def _served_nodes(self) -> list[NodeConfig]:
        """The nodes the last serve started on (every node when unknown)."""
        names = ((read_state(self.config) or {}).get("serve") or {}).get("nodes")
        if not names:
            return list(self.config.nodes)
        return [n for n in self.config.nodes if n.name in names]

    # -- start ----------------------------------------------------------------------------
    def start(
        self,
        model: str | None,
        tp: int | None,
        host: str | None,
        port: int | None,
        allow_fallback: bool,
        insecure: bool,
        wait_s: float = HEALTH_TIMEOUT_S,
        executor: str | None = None,
        engine: str | None = None,
    ) -> ServeResult:
        serve = self.config.serve
        serve = replace(
            serve,
            host=host or serve.host,
            port=port or serve.port,
            executor=executor or serve.executor,
            engine=engine or serve.engine,
        )
        model = model or serve.model
        if not model:
            raise UsageError("no model: pass MODEL or set [serve] model in halo.toml")
        api_key = self._check_key(serve, insecure)
        plans = self._plans()
        if self.head.name not in plans:
            raise LifecycleError("the cluster is not up (no state): run 'halo up' first")
        if serve.engine == "llama.cpp":
            from halo_cluster.cluster.llama_server import LlamaCpp

            if tp is not None or executor is not None:
                raise UsageError(
                    "--tp and --executor are vLLM's: llama.cpp splits the layers over every node"
                )
            result = LlamaCpp(self).start(serve, model, api_key, wait_s, plans)
        else:
            tp = tp or serve.tensor_parallel_size or len(self.config.nodes)
            world = tp * serve.pipeline_parallel_size
            places = placement(self.config.nodes, self._capacity(), world, f"--tp {tp}")
            self.stop()
            self._preflight(serve, model, places)
            launch = Launch(serve, model, tp, places, plans)
            result = self.bring_up(
                serve, wait_s, lambda: self._launch(launch, api_key), lambda: self._prove(launch)
            )
        if result.problems and not allow_fallback:
            self.stop()
            result.stopped = True
        return result

    def bring_up(
        self,
        serve: ServeConfig,
        wait_s: float,
        launch: Callable[[], None],
        prove: Callable[[], ServeResult],
    ) -> ServeResult:
        """Start (``launch``), wait for /health, warm up, then ``prove``; whatever ends this
        early (an error, Ctrl-C) stops what was started on every node."""
        started = time.monotonic()
        try:
            launch()
            self._wait_healthy(serve, wait_s)
            ready_s = time.monotonic() - started
            self.progress("warming up (one short request)")
            warm = self._complete(serve, WARMUP_TOKENS)
            result = prove()
        except BaseException:
            self.progress("stopping the server on every node")
            self.stop()
            raise
        result.ready_s, result.warmup_s = round(ready_s, 1), warm.get("seconds")
        return result

    def _check_key(self, serve: ServeConfig, insecure: bool) -> str | None:
        api_key = secret(serve.api_key_env)
        if serve.api_key_env and not api_key:
            raise UsageError(
                f"[serve] api_key_env names {serve.api_key_env}, which is not set here"
            )
        if serve.host == "0.0.0.0" and not api_key and not insecure:
            raise UsageError(
                "refusing to serve on 0.0.0.0 without an API key: set [serve] api_key_env, "
                "bind a private address, or pass --insecure"
            )
        return api_key

    def _preflight(self, serve: ServeConfig, model: str, places: list[Placement]) -> None:
        """Every node that takes ranks has the engine and the model; the head's port is free."""
        self.progress("checking the engine, the model and the port on every node")
        local_model = model if is_local_model(model) else None
        head_port = (local_host(serve.host), serve.port)

        def check(node: NodeConfig) -> tuple[NodeConfig, Result]:
            port = head_port if node is self.head else None
            return node, self._run(node, preflight_script(serve.command, local_model, port), 30)

        nodes = [p.node for p in places]
        if self.head not in nodes:
            nodes.insert(0, self.head)
        for node, result in self._each(nodes, check):
            if result.ok:
                continue
            reason = PREFLIGHT.get(result.returncode)
            if reason is None:
                raise LifecycleError(f"{node.name}: cannot check it: {result.error_text()}")
            raise UsageError(
                f"{node.name}: "
                + reason.format(command=serve.command, model=model, port=serve.port)
            )

    def _env(self, node: NodeConfig, plan: TransportPlan, api_key: str | None) -> dict[str, str]:
        env = {
            **plan.env,
            **dict(node.env),
            "NCCL_DEBUG": "INFO",
            "NCCL_DEBUG_SUBSYS": "INIT,NET",
            # every rank's start-up line must reach the log (Ray folds lines that differ
            # only in numbers, such as "rank=1")
            "RAY_DEDUP_LOGS": "0",
            **ray_env(self.config),
        }
        for name, value in (("VLLM_API_KEY", api_key), ("HF_TOKEN", secret("HF_TOKEN"))):
            if value:
                env[name] = value
        return env

    def _launch(self, launch: Launch, api_key: str | None) -> None:
        serve, plans = launch.serve, launch.plans
        unified = "APU" in plans[self.head.name].reasons.get("NCCL_NET_GDR_LEVEL", "")
        nodes = [self.head] if serve.executor == "ray" else [p.node for p in launch.places]
        update_state(self.config, "serve", {"nodes": [n.name for n in nodes]})
        master = plans[self.head.name].address or self.head.host
        for index, node in enumerate(nodes):
            mp = (index, len(nodes), master, MP_MASTER_PORT) if serve.executor == "mp" else None
            argv = serve_argv(serve, launch.model, launch.tp, unified, mp)
            self.progress(
                f"starting vllm serve {launch.model} (TP={launch.tp}, {serve.executor}) "
                f"on {node.name}"
            )
            env = self._env(node, plans[node.name], api_key)
            started = self._run(node, background_script(env, argv, self.config.name))
            if not started.ok:
                self.stop()
                raise LifecycleError(
                    f"could not start the server on {node.name}: {started.error_text()}"
                )

    def _wait_healthy(self, serve: ServeConfig, wait_s: float) -> None:
        argv = self.head.command("serve-health", "--host", local_host(serve.host))
        argv += ["--port", str(serve.port)]
        script = node_script({"HALO_SERVE_KEY": secret(serve.api_key_env) or ""}, argv)
        served = self._served_nodes()  # fixed for this start: read once
        started = time.monotonic()
        deadline = started + wait_s
        while True:
            if self._run(self.head, script, 30).ok:
                return
            dead = [n.name for n in served if not self._alive(n)]
            if dead:
                raise LifecycleError(
                    f"the server exited while starting on {', '.join(dead)}: "
                    f"{self.fatal_line(self.config.node(dead[0]))}"
                )
            if time.monotonic() > deadline:
                raise LifecycleError(
                    f"the server did not become healthy within {wait_s:g} s; stopped it"
                )
            waited = time.monotonic() - started
            if int(waited) // 10 != int(waited - 1.5) // 10:  # a line every 10 s
                self.progress(f"waiting for /health ({waited:.0f} s)")
            time.sleep(1.0)

    def _complete(self, serve: ServeConfig, tokens: int) -> dict[str, Any]:
        import json

        argv = self.head.command("serve-probe", "--host", local_host(serve.host))
        argv += ["--port", str(serve.port)]
        argv += ["--tokens", str(tokens)]
        env = {"HALO_SERVE_KEY": secret(serve.api_key_env) or ""}
        result = self._run(self.head, node_script(env, argv), 300)
        if not result.ok:
            raise LifecycleError(f"a request to the server failed: {result.error_text()}")
        try:
            data: dict[str, Any] = json.loads(result.stdout)
        except ValueError:
            raise LifecycleError(f"serve-probe answered {result.stdout[:200]!r}") from None
        return data

    # -- proof ----------------------------------------------------------------------------
    def _prove(self, launch: Launch) -> ServeResult:
        serve, places, plans = launch.serve, launch.places, launch.plans
        head_plan = plans[self.head.name]
        expected = "rdma" if head_plan.is_rdma else "socket"
        addresses = {p.node.name: plans[p.node.name].address or p.node.host for p in places}
        logs = [
            (f"{n.name}:serve.log", plans[n.name].address, self.log_text(n))
            for n in self._served_nodes()
        ]
        engine, nccl, rank_problems = proof.engine_witness(logs, head_plan.address, addresses)
        problems = []
        if engine.ranks or nccl.transport == "unknown":  # NCCL's log alone also witnesses
            problems += rank_problems
        if engine.backend == "gloo" and expected != "socket":
            problems.append("the ranks used Gloo (TCP sockets) although RDMA was planned")
        if nccl.transport != "unknown" and not nccl.meets(expected):
            problems.append(f"NCCL's log shows {nccl.transport}, the plan asked for {expected}")
        traffic = self.probe_traffic(serve, [p.node for p in places], plans, head_plan.is_rdma)
        problems += traffic["problems"]
        where = rank_nodes(engine, addresses, self.head.name)
        ranks = [
            {"rank": r.rank, "node": where.get(r.rank), "address": r.address or head_plan.address}
            for r in engine.ranks
        ]
        url, log = self.where(serve)
        result = ServeResult(
            url=url,
            log=log,
            executor=serve.executor,
            model=launch.model,
            tp=launch.tp,
            expected=expected,
            verdict=nccl.to_dict(),
            engine=engine.to_dict(),
            traffic=traffic,
            ranks=ranks,
            proven=None
            if problems
            else nccl.transport
            if nccl.transport != "unknown"
            else "socket",
            problems=problems,
        )
        update_state(self.config, "serve", state_summary(result, serve, self.head.name))
        return result

    def probe_traffic(
        self,
        serve: ServeConfig,
        nodes: list[NodeConfig],
        plans: dict[str, TransportPlan],
        rdma: bool,
    ) -> dict[str, Any]:
        """The counters witness: every node's paths read around one probe request."""
        self.progress(f"probe: one request of {PROBE_TOKENS} tokens, counters on every node")
        before = proof.read_counters(self.lifecycle.runners, nodes, plans)
        probe = self._complete(serve, PROBE_TOKENS)
        after = proof.read_counters(self.lifecycle.runners, nodes, plans)
        traffic = proof.traffic_witness(before, after, int(probe["completion_tokens"]), rdma)
        traffic["seconds"] = probe["seconds"]
        return traffic

    def where(self, serve: ServeConfig) -> tuple[str, str]:
        """(the API's URL, the server's log file on the head, expanded there)."""
        log, _pid = log_paths(self.config.name)
        host = serve.host if serve.host != "0.0.0.0" else self.head.host
        shown = self._run(self.head, f"echo {log}\n").stdout.strip() or log
        return f"http://{host}:{serve.port}", shown

    # -- running server -------------------------------------------------------------------
    def _alive(self, node: NodeConfig) -> bool:
        return self._run(node, alive_script(self.config.name)).ok

    def log_text(self, node: NodeConfig) -> str:
        log, _pid = log_paths(self.config.name)
        return self._run(node, f"cat {log} 2>/dev/null\n", timeout=120).stdout

    def fatal_line(self, node: NodeConfig) -> str:
        """The line of the log that says why the engine stopped (else its last lines)."""
        from halo_cluster.engine_log import clean

        lines = [clean(line).strip() for line in self.log_text(node).splitlines()]
        lines = [line for line in lines if line]
        for line in reversed(lines):
            said = "Error" in line or "refuses" in line or line.startswith("Failed to")
            if said and not line.startswith("File "):
                return line[-400:]
        return " | ".join(lines[-3:])[-400:] or "its log is empty"

    def tail(self, lines: int = 200, node: NodeConfig | None = None) -> str:
        log, _pid = log_paths(self.config.name)
        return self._run(node or self.head, f"tail -n {int(lines)} {log}\n").stdout

    def log_from(self, offset: int, node: NodeConfig | None = None) -> str:
        log, _pid = log_paths(self.config.name)
        return self._run(
            node or self.head, f"tail -c +{int(offset) + 1} {log} 2>/dev/null\n"
        ).stdout

    def stop(self) -> bool:
        """Stop the server on every node it ran on; True when one was running."""
        script = stop_script(self.config.name)
        results = self._each(list(self.config.nodes), lambda n: self._run(n, script, 60))
        update_state(self.config, "serve", None)  # no server: status shows none
        return any(r.ok for r in results)
