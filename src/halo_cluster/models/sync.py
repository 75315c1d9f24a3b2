"""``halo model sync``: the same model on every node, sent once.

1. The source is hashed into a manifest (``model_source``).
2. Each node says what it holds (``model-state``: one round trip); a node that holds the
   same complete manifest is done. For the others: the files missing or different, and
   where a partial left by an earlier sync may resume (its prefix checked against the
   source's).
3. One chain: the source (this machine, or the node holding it) -> the first node -> the
   next…; every hop writes what it needs and forwards the stream while it arrives, over the
   nodes' fabric addresses (the first hop from this machine over whatever reaches it). The
   receiving hops start at once and listen; the source then gets the route (addresses,
   ports, one-time secrets) and each hop passes the rest of it on in-band. Each admits one
   peer with its own secret (environment, never argv).
4. A node that failed (killed, disk full) does not stop the others; a second round resumes
   what a broken chain left unfinished, while it makes progress.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from halo_cluster.client.fanout import Outcome, fan_out
from halo_cluster.cluster.handle import Cluster
from halo_cluster.errors import ModelError
from halo_cluster.jsonout import JsonObject
from halo_cluster.models.source import Source
from halo_cluster.modelstore.manifest import Manifest
from halo_cluster.modelstore.pipe import new_secret, relay
from halo_cluster.modelstore.transfer import (
    ModelState,
    PipeDone,
    PipeEvent,
    PipeSpec,
    RouteHop,
    StreamFile,
    parse_model_state,
    parse_pipe_event,
)
from halo_cluster.wire.commands import MODEL_PIPE, MODEL_SPEC_ENV, MODEL_STATE, MODEL_STOP

PIPE_TIMEOUT_S = 7 * 24 * 3600.0  # the hops end on their own (idle and wait limits)
WAIT_S = 120.0  # a hop's listener waits this long for the hop before it
IDLE_S = 60.0  # and the stream may stall this long
MAX_ROUNDS = 3


@dataclass
class NodeSync:
    """One node's part in a sync: what it needed, what happened."""

    name: str
    status: str = "pending"  # same, synced, failed, unreachable
    files: int = 0  # files it needed
    bytes: int = 0  # bytes it needed
    written: int = 0  # bytes written to its store
    received: int = 0  # bytes that reached it (its own and those it forwarded)
    seconds: float = 0.0
    reason: str | None = None
    resumed: int = 0  # bytes not sent again: verified prefixes of partials
    cpu_s: float | None = None  # its hop's process, user and system (None: not told)

    def to_dict(self) -> JsonObject:
        return {
            "status": self.status,
            "files": self.files,
            "bytes": self.bytes,
            "written": self.written,
            "received": self.received,
            "resumed": self.resumed,
            "seconds": round(self.seconds, 3),
            "mb_s": _rate(self.received, self.seconds),
            "cpu_s": None if self.cpu_s is None else round(self.cpu_s, 3),
            "cpu_s_per_gb": _per_gb(self.cpu_s, self.received),
            "reason": self.reason,
        }


@dataclass
class SyncResult:
    name: str
    manifest: Manifest
    source: str
    nodes: dict[str, NodeSync]
    seconds: float = 0.0
    rounds: int = 0
    sent: int = 0  # bytes read from the source into the chain
    left_out: tuple[str, ...] = ()  # the source's files not synced (hidden: no engine reads them)
    controller_cpu_s: float = 0.0  # this machine, its SSH clients included
    source_cpu_s: float | None = None  # the source node's hop (None: the source is here)

    @property
    def ok(self) -> bool:
        return all(n.status in ("same", "synced") for n in self.nodes.values())

    def to_dict(self) -> JsonObject:
        return {
            "name": self.name,
            "digest": self.manifest.digest,
            "size": self.manifest.size,
            "files": len(self.manifest.files),
            "source": self.source,
            "seconds": round(self.seconds, 3),
            "rounds": self.rounds,
            "sent": self.sent,
            "mb_s": _rate(self.sent, self.seconds),
            "cpu_s_per_gb": {
                "controller": _per_gb(self.controller_cpu_s, self.sent),
                "source": _per_gb(self.source_cpu_s, self.sent),
            },
            "left_out": list(self.left_out),
            "ok": self.ok,
            "nodes": {name: n.to_dict() for name, n in self.nodes.items()},
        }


@dataclass
class _Need:
    want: dict[str, int]  # file -> the offset it resumes from
    complete: bool  # already holds this manifest, complete


def node_state(cluster: Cluster, node: str, name: str) -> ModelState:
    client = cluster.client(node)
    answer = client.call_json(*MODEL_STATE.argv(store=cluster.config.models.dir, name=name))
    try:
        return parse_model_state(answer)
    except ModelError as err:
        raise ModelError(f"{node}: model-state: {err}") from None


def _needs(manifest: Manifest, state: ModelState, prefixes: dict[str, dict[int, str]]) -> _Need:
    want: dict[str, int] = {}
    for entry in manifest.files:
        have = state.files.get(entry.path)
        if have is not None and (have.sha256, have.size) == (entry.sha256, entry.size):
            continue
        partial = state.partials.get(entry.path)
        if partial is not None and 0 < partial.size < entry.size:
            ok = prefixes.get(entry.path, {}).get(partial.size) == partial.sha256
            want[entry.path] = partial.size if ok else 0
        else:
            want[entry.path] = 0
    extra = set(state.files) - {f.path for f in manifest.files}
    held = state.manifest is not None and state.manifest.digest == manifest.digest
    return _Need(want, held and not want and not extra)


def _asked_prefixes(manifest: Manifest, states: dict[str, ModelState]) -> dict[str, set[int]]:
    sizes = manifest.by_path()
    asked: dict[str, set[int]] = {}
    for state in states.values():
        for rel, partial in state.partials.items():
            if rel in sizes and 0 < partial.size <= sizes[rel].size:
                asked.setdefault(rel, set()).add(partial.size)
    return asked


@dataclass
class _Hop:
    node: str | None  # None: this machine
    spec: PipeSpec
    listening: threading.Event = field(default_factory=threading.Event)
    address: str | None = None
    port: int | None = None
    done: PipeDone | None = None
    error: str | None = None
    received: int = 0
    written: int = 0
    total: int = 0
    thread: threading.Thread | None = None

    def on_event(self, event: PipeEvent) -> None:
        if event.kind == "listening":
            self.address, self.port = event.address, event.port
            self.listening.set()
        elif event.kind == "progress":
            self.received, self.written, self.total = event.received, event.written, event.total
        elif event.kind == "done":
            self.done = event.done


class StateAhead:
    """Every target's state of model ``name``, asked on a thread of its own while the
    source is hashed (both are a round trip to a node): ``for_manifest`` hands the answers
    over when the manifest got that name, and None when it did not (they are asked again)."""

    def __init__(self, cluster: Cluster, targets: list[str], name: str) -> None:
        self.name = name
        self._outcomes: list[Outcome[str, ModelState]] = []
        self._thread = threading.Thread(
            target=self._ask, args=(cluster, targets), daemon=True, name="model-state-ahead"
        )
        self._thread.start()

    def _ask(self, cluster: Cluster, targets: list[str]) -> None:
        self._outcomes = fan_out(targets, lambda n: node_state(cluster, n, self.name))

    def wait(self) -> None:
        self._thread.join()

    def for_manifest(self, manifest: Manifest) -> list[Outcome[str, ModelState]] | None:
        self.wait()
        return self._outcomes if manifest.name == self.name else None


class Sync:
    def __init__(
        self,
        cluster: Cluster,
        source: Source,
        targets: list[str],
        on_progress: Callable[[dict[str, _Hop]], None] | None = None,
        ahead: StateAhead | None = None,
    ) -> None:
        self.cluster = cluster
        self.source = source
        self.targets = targets
        self.on_progress = on_progress or (lambda _hops: None)
        self.manifest = source.manifest
        self.run_id = new_secret()[:16]
        self._ahead = ahead.for_manifest(self.manifest) if ahead is not None else None

    def run(self) -> SyncResult:
        started, cpu_started = time.monotonic(), _cpu_s()
        result = SyncResult(
            self.manifest.name,
            self.manifest,
            self.source.label,
            {n: NodeSync(n) for n in self.targets},
            left_out=self.source.left_out,
        )
        pending = list(self.targets)
        for round_number in range(1, MAX_ROUNDS + 1):
            result.rounds = round_number
            needs = self._plan(pending, result)
            chain = [n for n in pending if n in needs]
            if not chain:
                break
            before = sum(result.nodes[n].written for n in chain)
            self._round(chain, needs, result)
            pending = [n for n in chain if result.nodes[n].status == "failed"]
            retry = [n for n in pending if _resumable(result.nodes[n].reason)]
            gained = sum(result.nodes[n].written for n in chain) - before
            if not retry or gained <= 0:
                break
            pending = retry
        result.seconds = time.monotonic() - started
        result.controller_cpu_s = _cpu_s() - cpu_started
        return result

    # -- planning ---------------------------------------------------------------------------
    def _plan(self, nodes: list[str], result: SyncResult) -> dict[str, _Need]:
        """What each node needs (one round trip per node, in parallel); nodes that hold
        the manifest already are marked ``same``; unreachable ones ``unreachable``."""
        outcomes, self._ahead = self._ahead, None  # asked ahead: the first round's only
        if outcomes is None or [o.item for o in outcomes] != nodes:
            outcomes = fan_out(nodes, lambda n: node_state(self.cluster, n, self.manifest.name))
        states: dict[str, ModelState] = {}
        for outcome in outcomes:
            if outcome.error is not None or outcome.value is None:
                node = result.nodes[outcome.item]
                node.status, node.reason = "unreachable", str(outcome.error)
                continue
            states[outcome.item] = outcome.value
        prefixes = self.source.prefixes(self.cluster, _asked_prefixes(self.manifest, states))
        needs: dict[str, _Need] = {}
        sizes = self.manifest.by_path()
        for name, state in states.items():
            need = _needs(self.manifest, state, prefixes)
            node = result.nodes[name]
            if need.complete:  # held before this sync, or completed by an earlier round
                node.status = "same" if node.status == "pending" else "synced"
                node.reason = None
                continue
            node.files = len(need.want)
            node.bytes = sum(sizes[rel].size for rel in need.want)
            node.resumed = sum(need.want.values())
            needs[name] = need
        return needs

    # -- one chain --------------------------------------------------------------------------
    def _round(self, chain: list[str], needs: dict[str, _Need], result: SyncResult) -> None:
        stream = self._stream(chain, needs)
        source_node = self.source.node
        hops: dict[str, _Hop] = {}
        order = [n for n in chain if n != source_node]
        first_from_here = source_node is None
        try:
            secrets = {node: new_secret() for node in order}
            for index, node in enumerate(order):  # every receiving hop at once
                listen = self._listen_address(node, index == 0 and first_from_here)
                spec = replace(self._spec(stream, needs[node]), listen=listen, secret=secrets[node])
                hops[node] = _Hop(node, spec)
                self._start(hops[node])
            route = []
            for node in order:  # in chain order, those that listen
                hop = hops[node]
                while not hop.listening.wait(0.2):
                    if hop.thread is not None and not hop.thread.is_alive():
                        break
                if hop.listening.is_set() and hop.port and hop.address:
                    route.append(RouteHop(hop.address, hop.port, secrets[node]))
            if route or source_node in needs:  # else no hop listens: each says why
                self._send(stream, needs.get(source_node or ""), route, hops)
            self._watch(hops)
        except BaseException:
            self._stop(hops)
            raise
        finally:
            self._record(hops, result)

    def _send(
        self,
        stream: tuple[StreamFile, ...],
        need: _Need | None,
        route: list[RouteHop],
        hops: dict[str, _Hop],
    ) -> None:
        """The chain's first hop: the source's files read here, or on the node holding them
        (which writes its own store too when it needs the model)."""
        spec = replace(self._spec(stream, need), files=dict(self.source.files), route=tuple(route))
        if self.source.node is None:
            hop = hops[""] = _Hop(None, spec)
            hop.thread = threading.Thread(target=self._local, args=(hop,), daemon=True)
            hop.thread.start()
        else:
            hop = hops[self.source.node] = _Hop(self.source.node, spec)
            self._start(hop)

    def _stream(self, chain: list[str], needs: dict[str, _Need]) -> tuple[StreamFile, ...]:
        out = []
        for entry in self.manifest.files:
            offsets = [needs[n].want[entry.path] for n in chain if entry.path in needs[n].want]
            if offsets:
                out.append(StreamFile(entry.path, entry.size, entry.sha256, min(offsets)))
        return tuple(out)

    def _spec(self, stream: tuple[StreamFile, ...], need: _Need | None) -> PipeSpec:
        """A hop's spec, before its source is set (the files here, or the hop before)."""
        return PipeSpec(
            run=self.run_id,
            store=self.cluster.config.models.dir,
            target=need is not None,
            manifest=self.manifest,
            stream=stream,
            want=need.want if need is not None else {},
            wait_s=WAIT_S,
            idle_s=IDLE_S,
        )

    def _listen_address(self, node: str, from_here: bool) -> str:
        """The fabric address; for the chain's first node when the source is this machine,
        the address this machine's SSH reached it at (whatever reaches it)."""
        if from_here:
            return "ssh"
        config = self.cluster.config.node(node)
        return config.fabric_address or config.host

    def _start(self, hop: _Hop) -> None:
        assert hop.node is not None
        client = self.cluster.client(hop.node)

        def work() -> None:
            def line(text: str) -> None:
                event = parse_pipe_event(text)
                if event is not None:
                    hop.on_event(event)

            try:
                done = client.call(
                    *MODEL_PIPE.argv(),
                    env={MODEL_SPEC_ENV: hop.spec.to_json()},
                    timeout=PIPE_TIMEOUT_S,
                    on_line=line,
                )
            except Exception as err:
                hop.error = str(err)
                return
            if hop.done is None:
                hop.error = done.error_text() if not done.ok else "the hop ended without a result"

        hop.thread = threading.Thread(target=work, daemon=True, name=f"model-{hop.node}")
        hop.thread.start()

    def _local(self, hop: _Hop) -> None:
        try:
            relay(hop.spec, hop.on_event)
        except Exception as err:
            hop.error = str(err)

    def _watch(self, hops: dict[str, _Hop]) -> None:
        while any(h.thread is not None and h.thread.is_alive() for h in hops.values()):
            self.on_progress(hops)
            for hop in hops.values():
                if hop.thread is not None:
                    hop.thread.join(0.5 / max(1, len(hops)))
        self.on_progress(hops)

    def _stop(self, hops: dict[str, _Hop]) -> None:
        """Ctrl-C: end every hop this run started on the nodes (they would end on their own
        within the idle limit; this does not wait for that)."""
        nodes = [n for n in hops if n]
        fan_out(
            nodes,
            lambda n: self.cluster.client(n).call(*MODEL_STOP.argv(run=self.run_id), timeout=15),
        )

    def _record(self, hops: dict[str, _Hop], result: SyncResult) -> None:
        local = hops.get("")
        if local is not None:
            result.sent += local.received
        elif self.source.node in hops:
            source = hops[self.source.node]
            result.sent += source.received
            if source.done is not None and source.done.cpu_s is not None:
                result.source_cpu_s = (result.source_cpu_s or 0.0) + source.done.cpu_s
        for name, hop in hops.items():
            if not name or name not in result.nodes or not hop.spec.target:
                continue  # this machine, or the source node only sending
            node = result.nodes[name]
            done = hop.done or PipeDone(received=hop.received, written=hop.written)
            node.written += done.written or hop.written
            node.received += done.received or hop.received
            node.seconds += done.seconds
            if done.cpu_s is not None:
                node.cpu_s = (node.cpu_s or 0.0) + done.cpu_s
            if done.complete:
                node.status, node.reason = "synced", None
                continue
            node.status = "failed"
            node.reason = _reason(hop, done)


def _cpu_s() -> float:
    """This process's CPU seconds so far and its children's that ended (the SSH clients)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _rate(size: int, seconds: float) -> float | None:
    return round(size / seconds / 1e6, 1) if seconds > 0 and size else None


def _per_gb(cpu_s: float | None, size: int) -> float | None:
    return round(cpu_s / (size / 1e9), 3) if cpu_s is not None and size else None


def _reason(hop: _Hop, done: PipeDone) -> str:
    if hop.error:
        return hop.error
    if done.failed:
        rel, why = next(iter(done.failed.items()))
        more = len(done.failed) - 1
        return f"{rel}: {why}" + (f" (and {more} more)" if more else "")
    return done.error or "did not complete"


def _resumable(reason: str | None) -> bool:
    """A failure a second round can fix: the stream broke upstream (a hop before was lost),
    not this node's own disk or data."""
    text = reason or ""
    return "hop before" in text or "nothing came" in text or "no peer came" in text
