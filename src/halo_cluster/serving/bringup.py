"""``halo serve`` for every engine: one bring-up.

1. the plans: from ``halo up`` when the engine runs on Ray, else from the nodes' facts and
   the doctor's gate (``cluster.plans``), so llama.cpp and vLLM's mp executor need no Ray;
2. the engine's ``check`` (refusals that need no node, before the plans) and ``prepare``
   (its checks on every node; nothing started yet), then the memory check (``memory``:
   every member's available memory against its share of the model and its KV cache);
3. the engine's start plan (run by ``engines.process.run_plan``), then /health on the
   head, a warm-up request;
4. the witnesses: the engine's own words (``Engine.witness``), every node's counters
   around one probe request (bytes per generated token on each path), and the tokens: the
   layout's greedy answers against the one-node reference of the same engine and model
   (``serving.reference``, ``witness.tokens``), or recorded as that reference.

A request may name a layout: the first N nodes of the cluster (``nodes``), the engine's
parallel sizes in its options.

Anything that ends this early (an error, Ctrl-C) stops what was started on every node.
When the witnesses show another path than the plans asked for, the server is stopped
(unless ``allow_fallback``); when its tokens differ from the reference, always. The state
file is read once and written twice: at launch (which nodes run something) and with the
proof.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
import time
from typing import Any

from halo_cluster.checks.engine_limits import LimitReport, limit_report, parse_limits_answer
from halo_cluster.client.fanout import each
from halo_cluster.cluster import proof
from halo_cluster.cluster.handle import Cluster
from halo_cluster.cluster.plans import ClusterPlans, make_plans
from halo_cluster.cluster.state import (
    ClusterState,
    NodeState,
    ServedState,
    new_state,
    read_state,
    write_state,
)
from halo_cluster.config import Config, NodeConfig, ServeConfig, secret
from halo_cluster.engines import process, scripts
from halo_cluster.engines.protocol import (
    Engine,
    Prepared,
    ServeContext,
    ServeRequest,
    Witness,
    find_engine,
)
from halo_cluster.engines.start import start_steps
from halo_cluster.errors import LifecycleError, UsageError, WireError
from halo_cluster.jsonout import JsonObject
from halo_cluster.models.stores import is_store_name, resolve
from halo_cluster.printable import printable
from halo_cluster.ray.auth import ray_env
from halo_cluster.serving import memory, reference
from halo_cluster.serving.result import ServeResult
from halo_cluster.supervise import control
from halo_cluster.supervision import CHECK_EVERY_S, StallWatch
from halo_cluster.wire.answers import ServeProbe, parse_serve_probe
from halo_cluster.wire.args import serve_health_args, serve_probe_args
from halo_cluster.wire.commands import SERVE_KEY_ENV
from halo_cluster.wire.supervise import Step, TokenCheck
from halo_cluster.witness.tokens import compare

HEALTH_TIMEOUT_S = 900.0
WARMUP_TOKENS = 4
PROBE_TOKENS = 64


def layout_label(engine: str, tp: int | None, pp: int, nodes: list[str]) -> str:
    """What runs where, in a few words: "vllm tp2 on node1+node2", "llama.cpp on node1"."""
    parts = [engine, *([f"tp{tp}"] if tp else []), *([f"pp{pp}"] if pp > 1 else [])]
    return " ".join(parts) + " on " + "+".join(nodes)


def layout_name(request: ServeRequest, prepared: Prepared) -> str:
    pp = getattr(request.options, "pipeline_parallel_size", 1) or 1
    return layout_label(request.engine, prepared.tp, pp, [n.name for n in prepared.witnesses])


def loopback_host(host: str) -> bool:
    """Whether a server bound to ``host`` answers this machine alone: ``localhost``, or an
    address the system reads as loopback. The address decides, not the text: '0', '0x0',
    '::', '[::]', '0000::' and '::ffff:0.0.0.0' all bind every interface, '127.1' and
    '::ffff:127.0.0.1' are loopback. Any other host name is not: it resolves on the head,
    to whatever its resolver says."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if text.rstrip(".").lower() == "localhost":
        return True
    if not text or any(c.isspace() for c in text):
        return False
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(
            text.partition("%")[0]
        )
    except ValueError:
        try:  # the resolver reads IPv4 as inet_aton does: '0', '0x0', '127.1', '2130706433'
            address = ipaddress.IPv4Address(socket.inet_aton(text))
        except (OSError, ValueError):
            return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


class Serving:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.config = cluster.config
        self.head = cluster.head
        self.progress = cluster.progress
        # the state file as this command read it, once (start and stop each read it: another
        # command, such as 'halo up', may have written it since)
        self._state: ClusterState | None = None
        self.launched = False  # whether the last start got as far as the engine's launch
        # the nodes' facts and plans, gathered once per command however many starts it makes
        # ('halo run' serves the one-node reference, then the layout; 'halo tune' each layout)
        self._plans: dict[bool, ClusterPlans] = {}
        # this command stopped every node and started nothing since: a start stops nothing
        self._stopped = False

    @property
    def state(self) -> ClusterState | None:
        """The state file as it is now."""
        return read_state(self.config)

    def _save(self, state: ClusterState) -> None:
        self._state = state
        write_state(self.config, state)

    # -- start ----------------------------------------------------------------------------
    def start(self, request: ServeRequest) -> ServeResult:
        self._state, self.launched = self.state, False
        engine = find_engine(request.engine)
        api_key = self._check_key(request.serve, request.insecure)
        request = self._from_store(engine, request)
        layout = self._layout_config(request)
        engine.check(layout, request)
        ctx = self._context(engine, request, api_key, layout)
        if not self._stopped:
            self._stop()
        prepared = engine.prepare(ctx)
        name = layout_name(request, prepared)
        if request.reference == "record" and len(prepared.witnesses) > 1:
            raise UsageError(
                f"a token reference is recorded on one node, not on {name}: add --nodes 1"
                + (" --tp 1" if prepared.tp and prepared.tp > 1 else "")
            )
        known = (  # read before anything starts: a file halo cannot read is one line now
            None
            if request.reference in ("off", "record")
            else reference.find_reference(self.config, request.engine, request.model)
        )
        rows = memory.check(ctx, prepared, engine.memory(ctx, prepared), request.force)
        started = time.monotonic()
        try:
            self._record_launch(ctx, prepared)
            plan = engine.start_plan(ctx, prepared)
            self.launched, self._stopped = True, False
            process.run_plan(ctx.clients, plan, self.config.name, ctx.head.name, self.progress)
            self._wait_healthy(request, prepared.members)
            ready_s = time.monotonic() - started
            self.progress("warming up (one short request)")
            warm = self._complete(request.serve, WARMUP_TOKENS)
            witness = engine.witness(ctx, prepared)
            if len(prepared.witnesses) > 1 or prepared.rdma:
                traffic = self.probe_traffic(request.serve, ctx, prepared.witnesses, prepared.rdma)
            else:  # one node holds the whole model over sockets: no fabric, nothing to prove
                traffic = {"tokens": 0, "nodes": {}, "problems": [], "one_node": True}
            result = self._result(request, prepared, witness, traffic)
            result.ready_s, result.warmup_s = round(ready_s, 1), warm.seconds
            result.memory = {row.node: row.to_dict() for row in rows}
            needs = {row.node: row.need_bytes for row in rows}
            result.limits = self._limits(prepared, needs, engine.uses_ray(request.options))
            result.problems += [p for found in result.limits.values() for p in found.problems]
            result.layout = name
            result.tokens = self._tokens(request, name, known)
            wrong = result.tokens.get("problems") or []
            result.problems += wrong
            if wrong:
                result.proven = None
            self._record_proof(request, prepared, witness, result)
            refused = bool(wrong) or (bool(result.problems) and not request.allow_fallback)
            if request.serve.supervise.enabled and not refused:
                check = self._token_check(request, name, known)
                steps = start_steps(plan, self.config.name, ctx.head.name)  # what it replays
                result.supervisor = self._supervise(ctx, prepared, steps, witness, check)
        except BaseException:
            self.progress("stopping the server on every node")
            self._stop()
            raise
        if refused:
            self._stop()
            result.stopped = True
        return result

    def _layout_config(self, request: ServeRequest) -> Config:
        """The cluster as the layout sees it: its first ``nodes`` nodes (the head first)."""
        count = request.nodes
        if count is None:
            return self.config
        if not 1 <= count <= len(self.config.nodes):
            raise UsageError(
                f"--nodes {count}: the cluster has {len(self.config.nodes)} node(s) "
                f"({', '.join(n.name for n in self.config.nodes)})"
            )
        return dataclasses.replace(self.config, nodes=self.config.nodes[:count])

    def _tokens(
        self, request: ServeRequest, name: str, ref: reference.Reference | None
    ) -> dict[str, Any]:
        """The token witness: record this one-node layout's answers as the reference, or
        compare them with the reference recorded for this engine and model (the first
        prompts only unless ``full``); {"reference": None} when there is none yet."""
        mode, head = request.reference, self.cluster.client(self.head)
        if mode == "off":
            return {"skipped": "off"}
        if mode == "record":
            self.progress(f"token witness: recording {name}'s answers as the reference")
            found = reference.record(
                head, request.serve, request.engine, request.model, name, self.head.name
            )
            reference.save_reference(self.config, found)
            return {"recorded": name, "prompts": len(found.prompts), "tokens": found.tokens}
        if ref is None:
            return {"reference": None}
        count = len(ref.prompts) if mode == "full" else reference.SHORT_PROMPTS
        self.progress(f"token witness: {count} greedy answer(s) against {ref.layout}'s")
        answers = reference.ask(head, request.serve, ref.prompts[:count], ref.tokens)
        verdict = compare(name, ref.layout, ref.answers, answers)
        return verdict.to_dict()

    def _token_check(
        self, request: ServeRequest, name: str, ref: reference.Reference | None
    ) -> TokenCheck | None:
        """The token witness as this start ran it, for the supervisor to run again after a
        restart (None where it compared nothing: no reference, or this start recorded it)."""
        if ref is None or request.reference in ("off", "record"):
            return None
        count = len(ref.prompts) if request.reference == "full" else reference.SHORT_PROMPTS
        return TokenCheck(
            name, ref.layout, ref.prompts[:count], ref.tokens, reference.TOP, ref.answers[:count]
        )

    def _supervise(
        self,
        ctx: ServeContext,
        prepared: Prepared,
        steps: list[Step],
        witness: Witness,
        tokens: TokenCheck | None = None,
    ) -> JsonObject:
        installed = control.install(self.cluster, ctx, prepared, steps, witness.recheck, tokens)
        return installed.to_dict()

    def _from_store(self, engine: Engine, request: ServeRequest) -> ServeRequest:
        """A model named as in the nodes' stores (``halo model``): its path there, once every
        node that opens the weights holds it complete and the same (else one line naming the
        node and the sync that fixes it). Paths, Hugging Face ids and names that no store holds
        pass as they are."""
        if not is_store_name(request.model):
            return request
        readers = (
            [self.head.name] if engine.weights_on_head else [n.name for n in self.config.nodes]
        )
        self.progress(f"checking model {request.model} in the store of {', '.join(readers)}")
        found = resolve(self.cluster, request.model, readers)
        if found is None:  # in no store: the engine's own name for a model
            return request
        return dataclasses.replace(request, model=found.path)

    def _context(
        self, engine: Engine, request: ServeRequest, api_key: str | None, layout: Config
    ) -> ServeContext:
        """The plans and ranks: Ray's (from 'halo up') when the engine runs on Ray, else
        made now from the nodes' facts, gated by the doctor."""
        state = self._state
        if engine.uses_ray(request.options):
            if state is None or state.ray_started_at is None or self.head.name not in state.nodes:
                raise LifecycleError(
                    "Ray is not up (halo up has not run, or halo down has): run 'halo up' "
                    "first (or serve without Ray: --executor mp, or --engine llama.cpp)"
                )
            plans, capacity = state.plans(), state.capacity()
            env = ray_env(self.config)
        else:
            made = self._plans.get(request.force) or make_plans(self.cluster, request.force)
            self._plans[request.force] = made
            plans, capacity, env = made.plans, made.capacity, {}
            fresh = state or new_state(self.config)
            if fresh.ray_started_at is None:  # Ray's plans stay what Ray was started with
                fresh.nodes = {n: NodeState(p, capacity.get(n, 1)) for n, p in plans.items()}
            self._state = fresh
        return ServeContext(
            layout,
            self.cluster.clients,
            plans,
            capacity,
            request,
            api_key,
            env,
            self.progress,
        )

    def _check_key(self, serve: ServeConfig, insecure: bool) -> str | None:
        api_key = secret(serve.api_key_env)
        if serve.api_key_env and not api_key:
            raise UsageError(
                f"[serve] api_key_env names {serve.api_key_env}, which is not set here"
            )
        if not loopback_host(serve.host) and not api_key and not insecure:
            raise UsageError(
                f"refusing to serve on {printable(serve.host, limit=60)} without an API key "
                "(it is not a loopback address): set [serve] api_key_env, bind 127.0.0.1, "
                "or pass --insecure"
            )
        return api_key

    def _record_launch(self, ctx: ServeContext, prepared: Prepared) -> None:
        state = self._state or new_state(self.config)
        state.serve = ServedState(  # what to stop should halo be cut short from here on
            nodes=[m.name for m in prepared.members],
            engine=ctx.request.engine,
            model=ctx.request.model,
            started_at=time.time(),
        )
        self._save(state)

    # -- health and requests --------------------------------------------------------------
    def _limits(
        self, prepared: Prepared, need: dict[str, float | None], ray: bool = False
    ) -> dict[str, LimitReport]:
        """Each member's engine process as the kernel holds it: its locked-memory and
        open-files limits and its cgroup's memory limit, who set them, and what falls short
        of the plan (problems: locked memory under RDMA, a cgroup below the model's need;
        notes: open files), with the fix for that owner. An answer halo cannot read is a
        note, never a refusal."""

        def one(node: NodeConfig) -> tuple[str, LimitReport]:
            script = scripts.limits_script(self.config.name, ray)
            answer = self.cluster.client(node).script(script, 30)
            try:
                found = parse_limits_answer(node.name, answer.stdout)
            except WireError as err:
                return node.name, LimitReport(None, notes=(str(err),))
            return node.name, limit_report(found, prepared.rdma, need.get(node.name))

        return dict(each(prepared.members, one))

    def _wait_healthy(self, request: ServeRequest, members: list[NodeConfig]) -> None:
        serve = request.serve
        args = serve_health_args(scripts.local_host(serve.host), serve.port)
        env = {SERVE_KEY_ENV: secret(serve.api_key_env) or ""}
        head = self.cluster.client(self.head)
        started = time.monotonic()
        deadline = started + request.wait_s
        watch, asked = StallWatch(serve.stall_s), started - CHECK_EVERY_S
        while True:
            if head.call(*args, env=env, timeout=30).ok:
                return
            dead = [
                n for n in members if not process.alive(self.cluster.client(n), self.config.name)
            ]
            if dead:
                line = process.fatal_line(self.cluster.client(dead[0]), self.config.name)
                raise LifecycleError(
                    f"the server exited while starting on {', '.join(n.name for n in dead)}: {line}"
                )
            now = time.monotonic()
            if now - asked >= CHECK_EVERY_S:
                asked = now
                watch.observe(now, dict(each(members, self._progress)))
                stalled = watch.stalled(now)
                if stalled:
                    last = process.tail(head, self.config.name, 1).strip()[-300:]
                    raise LifecycleError(
                        f"{stalled}; the head's log ends with: {last or 'nothing'}; stopped it "
                        "(a slow disk or a huge model may need more: [serve] stall_s)"
                    )
            if time.monotonic() > deadline:
                raise LifecycleError(
                    f"the server did not become healthy within {request.wait_s:g} s; stopped it"
                )
            waited = time.monotonic() - started
            if int(waited) // 10 != int(waited - 1.5) // 10:  # a line every 10 s
                self.progress(f"waiting for /health ({waited:.0f} s)")
            time.sleep(1.0)

    def _progress(self, node: NodeConfig) -> tuple[str, str]:
        """A member's answer to the progress script (its log, its storage reads and writes)."""
        script = scripts.progress_script(self.config.name)
        return node.name, self.cluster.client(node).script(script, 30).stdout

    def _complete(self, serve: ServeConfig, tokens: int) -> ServeProbe:
        """One request of ``tokens`` tokens, sent on the head (a server bound to its
        loopback is reached too)."""
        args = serve_probe_args(scripts.local_host(serve.host), serve.port, tokens)
        env = {SERVE_KEY_ENV: secret(serve.api_key_env) or ""}
        result = self.cluster.client(self.head).call(*args, env=env, timeout=300)
        if not result.ok:
            raise LifecycleError(f"a request to the server failed: {result.error_text()}")
        try:
            return parse_serve_probe(result.stdout)
        except WireError as err:
            raise LifecycleError(f"{self.head.name}: {err}") from None

    def probe_traffic(
        self, serve: ServeConfig, ctx: ServeContext, nodes: list[NodeConfig], rdma: bool
    ) -> JsonObject:
        """The counters witness: every node's paths read around one probe request."""
        self.progress(f"probe: one request of {PROBE_TOKENS} tokens, counters on every node")
        before = proof.read_counters(self.cluster.clients, nodes, ctx.plans)
        probe = self._complete(serve, PROBE_TOKENS)
        after = proof.read_counters(self.cluster.clients, nodes, ctx.plans)
        traffic = proof.traffic_witness(before, after, probe.completion_tokens, rdma)
        traffic["seconds"] = probe.seconds
        return traffic

    # -- the result -----------------------------------------------------------------------
    def _result(
        self,
        request: ServeRequest,
        prepared: Prepared,
        witness: Witness,
        traffic: dict[str, Any],
    ) -> ServeResult:
        one_node = bool(traffic.get("one_node"))
        # on one node the engine meets no peer: a rendezvous or a path has nothing to show
        problems = [] if one_node else [*witness.problems, *traffic["problems"]]
        url, log = self.where(request.serve)
        return ServeResult(
            url=url,
            log=log,
            executor=prepared.executor,
            model=request.model,
            tp=prepared.tp,
            expected=witness.expected,
            verdict=witness.verdict,
            engine=witness.engine,
            traffic=traffic,
            ranks=witness.ranks,
            proven="one node" if one_node else None if problems else witness.transport,
            problems=problems,
        )

    def _record_proof(
        self, request: ServeRequest, prepared: Prepared, witness: Witness, result: ServeResult
    ) -> None:
        state = self._state or new_state(self.config)
        summary = witness.summary
        state.serve = ServedState(
            nodes=list(summary.get("nodes") or [m.name for m in prepared.members]),
            engine=request.engine,
            model=result.model,
            executor=result.executor,
            tp=result.tp,
            host=request.serve.host,
            port=request.serve.port,
            url=result.url,
            ranks=result.ranks,
            proven=result.proven,
            backend=summary.get("backend"),
            init_method=summary.get("init_method"),
            bytes_per_token={
                node: {path: v.get("bytes_per_token") for path, v in paths.items()}
                for node, paths in result.traffic.get("nodes", {}).items()
            },
            problems=result.problems,
            started_at=time.time(),
            layout=result.layout,
        )
        self._save(state)

    # -- a running server -----------------------------------------------------------------
    def where(self, serve: ServeConfig) -> tuple[str, str]:
        """(the API's URL, the server's log file on the head, expanded there)."""
        host = serve.host if serve.host != "0.0.0.0" else self.head.host
        log = process.log_path(self.cluster.client(self.head), self.config.name)
        return f"http://{host}:{serve.port}", log

    def tail(self, lines: int = 200, node: NodeConfig | None = None) -> str:
        return process.tail(self.cluster.client(node or self.head), self.config.name, lines)

    def log_from(self, offset: int, node: NodeConfig | None = None) -> str:
        return process.log_from(self.cluster.client(node or self.head), self.config.name, offset)

    def stop(self) -> bool:
        """Stop the server on every node; True when one was running."""
        self._state = self.state
        return self._stop()

    def _stop(self) -> bool:
        """The supervisor first (so it never restarts what is being stopped), then every
        node's server, twice if a start the supervisor had under way still landed; then the
        supervisor's key and spec are taken away."""
        name = self.config.name
        supervised = control.stop(self.cluster)
        nodes = list(self.config.nodes)
        stopped = each(nodes, lambda n: process.stop(self.cluster.client(n), name))
        if supervised:
            again = each(nodes, lambda n: process.stop(self.cluster.client(n), name))
            stopped = [a or b for a, b in zip(stopped, again, strict=True)]
        control.forget(self.cluster)
        state = self._state
        if state is not None and state.serve is not None:  # no server: status shows none
            state.serve = None
            self._save(state)
        self._stopped = True
        return any(stopped) or supervised
