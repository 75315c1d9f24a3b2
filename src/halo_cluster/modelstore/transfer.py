"""What crosses between the controller and the nodes for one ``halo model sync``, as typed
values with one parser each, used by both sides: a node's answer to ``model-state``
(``ModelState``), a hop's spec for ``model-pipe`` (``PipeSpec``, secrets in it: it travels in
the environment, never argv), the route a hop passes on in-band (``RouteHop``), and the
events a hop prints, one JSON line each (``PipeEvent``, the last one ``done``: ``PipeDone``).

They live beside the hop (``modelstore.pipe``) rather than in ``wire/`` because the hop runs
on both sides: on a node, and on the controller when the source is its own disk. Standard
library only, Python 3.9. A malformed value is one ``ModelError``, one line."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from halo_cluster.errors import ModelError
from halo_cluster.jsonout import JsonObject
from halo_cluster.modelstore import fields
from halo_cluster.modelstore.manifest import Manifest, manifest_from

MAX_LINE = 1 << 20  # an event or a route: one line, bounded


# -- model-state ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Held:
    """A file a node holds (or the prefix of a partial one): its size and sha256 (None when
    it changed since it was last hashed)."""

    size: int
    sha256: str | None

    def to_dict(self) -> JsonObject:
        return {"size": self.size, "sha256": self.sha256}


def _held(value: Any, where: str) -> dict[str, Held]:
    out = {}
    for rel, item in fields.obj(value if value is not None else {}, where).items():
        entry = fields.obj(item, f"{where} {rel}")
        digest = entry.get("sha256")
        out[str(rel)] = Held(
            fields.whole(entry.get("size"), f"{where} {rel} size"),
            None if digest is None else fields.text(digest, f"{where} {rel} sha256"),
        )
    return out


@dataclass(frozen=True)
class ModelState:
    """What a node holds of one model: its manifest when complete, every file, and the
    partials a sync can resume."""

    name: str
    store: str
    path: str
    manifest: Manifest | None
    files: dict[str, Held]
    partials: dict[str, Held]

    @property
    def complete(self) -> bool:
        return self.manifest is not None

    def to_dict(self) -> JsonObject:
        return {
            "name": self.name,
            "store": self.store,
            "path": self.path,
            "complete": self.complete,
            "manifest": self.manifest.to_dict() if self.manifest else None,
            "files": {rel: h.to_dict() for rel, h in self.files.items()},
            "partials": {rel: h.to_dict() for rel, h in self.partials.items()},
        }


def parse_model_state(value: Any) -> ModelState:
    """A node's ``model-state`` answer (parsed JSON)."""
    data = fields.obj(value, "model-state")
    held = data.get("manifest")
    return ModelState(
        fields.text(data.get("name"), "model-state name"),
        fields.text(data.get("store"), "model-state store", ""),
        fields.text(data.get("path"), "model-state path", ""),
        None if held is None else manifest_from(held, "model-state manifest"),
        _held(data.get("files"), "model-state files"),
        _held(data.get("partials"), "model-state partials"),
    )


# -- model-hash -----------------------------------------------------------------------------
@dataclass(frozen=True)
class HashAnswer:
    """A node's ``model-hash``: the manifest of a model it holds outside its store, each
    file's real path there, and the sha256 of the prefixes asked for (rel -> size -> sha256:
    a partial elsewhere, checked before it resumes)."""

    manifest: Manifest
    files: dict[str, str]
    prefixes: dict[str, dict[int, str]]

    def to_dict(self) -> JsonObject:
        return {
            "manifest": self.manifest.to_dict(),
            "files": dict(self.files),
            "prefixes": {
                rel: {str(n): sha for n, sha in sizes.items()}
                for rel, sizes in self.prefixes.items()
            },
        }


def _decimal(text: Any) -> int | None:
    """A size written as a JSON key: ASCII digits only ('²' is a digit to Python, no int)."""
    word = str(text)
    return int(word) if word.isascii() and word.isdigit() else None


def parse_hash_answer(value: Any) -> HashAnswer:
    """A node's ``model-hash`` answer (parsed JSON)."""
    data = fields.obj(value, "model-hash")
    files = fields.obj(data.get("files"), "model-hash files")
    prefixes = {}
    for rel, sizes in fields.obj(data.get("prefixes") or {}, "model-hash prefixes").items():
        where = f"model-hash prefix {rel}"
        prefixes[str(rel)] = {
            fields.whole(_decimal(n), where): fields.text(sha, where)
            for n, sha in fields.obj(sizes, where).items()
        }
    return HashAnswer(
        manifest_from(data.get("manifest"), "model-hash manifest"),
        {str(rel): fields.text(path, f"model-hash file {rel}") for rel, path in files.items()},
        prefixes,
    )


# -- model-pipe: the spec and the route ------------------------------------------------------
@dataclass(frozen=True)
class StreamFile:
    """A file of the stream, sent from ``offset`` to its end."""

    path: str
    size: int
    sha256: str
    offset: int

    def to_dict(self) -> JsonObject:
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "offset": self.offset}


@dataclass(frozen=True)
class RouteHop:
    """The next hop as the one before reaches it: where it listens, and its one-time secret."""

    address: str
    port: int
    secret: str = field(repr=False)

    def to_dict(self) -> JsonObject:
        return {"address": self.address, "port": self.port, "secret": self.secret}


def route_line(route: tuple[RouteHop, ...]) -> bytes:
    """The route as one line (what a hop sends after the next hop's secret)."""
    return json.dumps([h.to_dict() for h in route]).encode() + b"\n"


def parse_route(value: Any) -> tuple[RouteHop, ...]:
    if not isinstance(value, list):
        raise ModelError("the route is not a list of hops")
    out = []
    for item in value:
        hop = fields.obj(item, "a hop of the route")
        out.append(
            RouteHop(
                fields.text(hop.get("address"), "a hop's address"),
                fields.whole(hop.get("port"), "a hop's port"),
                fields.text(hop.get("secret"), "a hop's secret"),
            )
        )
    return tuple(out)


@dataclass(frozen=True)
class PipeSpec:
    """One hop: the model's manifest and the stream (every hop gets the same), what this hop
    writes (``want``: file -> the offset it resumes from; ``target``: its store is to hold the
    model at the end), and where the bytes come from: the source's own ``files`` (and then the
    ``route`` it starts), or the hop before, admitted on ``listen`` with ``secret``."""

    run: str
    store: str
    target: bool
    manifest: Manifest
    stream: tuple[StreamFile, ...]
    want: dict[str, int]
    listen: str | None = None  # an address, or "ssh": the one the controller reached
    secret: str = field(default="", repr=False)
    files: dict[str, str] | None = None  # rel -> the path it is read from here
    route: tuple[RouteHop, ...] = ()
    wait_s: float = 120.0
    idle_s: float = 60.0

    def with_route(self, route: tuple[RouteHop, ...]) -> PipeSpec:
        return replace(self, route=route)

    def to_json(self) -> str:
        source: JsonObject = (
            {"files": self.files}
            if self.files is not None
            else {"listen": self.listen, "secret": self.secret}
        )
        return json.dumps(
            {
                "run": self.run,  # first, as 'model-stop' finds a run's hops by it
                "store": self.store,
                "target": self.target,
                "manifest": self.manifest.to_dict(),
                "stream": [f.to_dict() for f in self.stream],
                "want": self.want,
                "input": source,
                "route": [h.to_dict() for h in self.route],
                "wait_s": self.wait_s,
                "idle_s": self.idle_s,
            }
        )


def parse_pipe_spec(text: str) -> PipeSpec:
    """``model-pipe``'s spec, from the environment."""
    try:
        data = fields.obj(json.loads(text), "the spec")
    except (ValueError, RecursionError):
        raise ModelError("the spec is not JSON") from None
    source = fields.obj(data.get("input") or {}, "the spec's input")
    files = source.get("files")
    stream = data.get("stream") or []
    if not isinstance(stream, list):
        raise ModelError("the spec's stream is not a list")
    want = fields.obj(data.get("want") or {}, "the spec's want")
    listen = None if files is not None else fields.text(source.get("listen"), "the spec's listen")
    read = None if files is None else fields.obj(files, "files")
    return PipeSpec(
        run=fields.text(data.get("run"), "the spec's run", ""),
        store=fields.text(data.get("store"), "the spec's store", ""),
        target=bool(data.get("target")),
        manifest=manifest_from(data.get("manifest"), "the spec's manifest"),
        stream=tuple(
            StreamFile(
                fields.text(f.get("path"), "a stream file's path"),
                fields.whole(f.get("size"), "a stream file's size"),
                fields.text(f.get("sha256"), "a stream file's sha256", ""),
                fields.whole(f.get("offset"), "a stream file's offset", 0),
            )
            for f in (fields.obj(item, "a stream file") for item in stream)
        ),
        want={str(k): fields.whole(v, f"want {k}") for k, v in want.items()},
        listen=listen,
        secret=fields.text(source.get("secret"), "the spec's secret", ""),
        files=None
        if read is None
        else {str(k): fields.text(v, f"source file {k}") for k, v in read.items()},
        route=parse_route(data.get("route") or []),
        wait_s=fields.number(data.get("wait_s"), "the spec's wait_s", 120.0),
        idle_s=fields.number(data.get("idle_s"), "the spec's idle_s", 60.0),
    )


# -- model-pipe: the events ------------------------------------------------------------------
@dataclass(frozen=True)
class PipeDone:
    """How a hop ended: the files it verified, those that failed and why, an error that
    ended it, whether it forwarded everything, and whether its store now holds the model
    (None: it was not to hold it)."""

    verified: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    forwarded: bool = True
    forward_error: str | None = None
    complete: bool | None = None
    received: int = 0
    written: int = 0
    seconds: float = 0.0
    cpu_s: float | None = None  # the hop's process, user and system (None: not told)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.failed and self.forwarded

    def to_dict(self) -> JsonObject:
        return {
            "event": "done",
            "verified": list(self.verified),
            "failed": dict(self.failed),
            "error": self.error,
            "forwarded": self.forwarded,
            "forward_error": self.forward_error,
            "complete": self.complete,
            "received": self.received,
            "written": self.written,
            "seconds": self.seconds,
            "cpu_s": self.cpu_s,
        }


def _done(data: dict[str, Any]) -> PipeDone:
    failed = fields.obj(data.get("failed") or {}, "done's failed")
    complete = data.get("complete")
    error, forward_error = data.get("error"), data.get("forward_error")
    cpu_s = data.get("cpu_s")
    return PipeDone(
        tuple(fields.text(v, "a verified file") for v in data.get("verified") or []),
        {str(k): fields.text(v, f"failed {k}") for k, v in failed.items()},
        None if error is None else fields.text(error, "done's error"),
        bool(data.get("forwarded", True)),
        None if forward_error is None else fields.text(forward_error, "done's forward_error"),
        None if complete is None else bool(complete),
        fields.whole(data.get("received"), "done's received", 0),
        fields.whole(data.get("written"), "done's written", 0),
        fields.number(data.get("seconds"), "done's seconds", 0.0),
        None if cpu_s is None else fields.number(cpu_s, "done's cpu_s", 0.0),
    )


EVENTS = ("listening", "admitted", "refused", "progress", "file", "forward-failed", "done")


@dataclass(frozen=True)
class PipeEvent:
    """One line a hop prints. ``listening``: ``address``, ``port``; ``admitted``/``refused``:
    ``peer``; ``progress``: ``received``, ``written``, ``total``, ``seconds``; ``file``:
    ``path``, ``verified``, ``reason``; ``forward-failed``: ``reason``; ``done``: ``done``."""

    kind: str
    address: str | None = None
    port: int = 0
    peer: str | None = None
    received: int = 0
    written: int = 0
    total: int = 0
    seconds: float = 0.0
    path: str | None = None
    verified: bool | None = None
    reason: str | None = None
    done: PipeDone | None = None

    def to_dict(self) -> JsonObject:
        if self.done is not None:
            return self.done.to_dict()
        shapes: dict[str, JsonObject] = {
            "listening": {"address": self.address, "port": self.port},
            "admitted": {"peer": self.peer},
            "refused": {"peer": self.peer},
            "progress": {
                "total": self.total,
                "received": self.received,
                "written": self.written,
                "seconds": self.seconds,
            },
            "file": {"path": self.path, "verified": self.verified, "reason": self.reason},
            "forward-failed": {"reason": self.reason},
        }
        return {"event": self.kind, **shapes[self.kind]}


def parse_pipe_event(line: str) -> PipeEvent | None:
    """A hop's line -> its event; None for a line that is not one (a hop's stray output)."""
    if len(line) > MAX_LINE:
        return None
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("event") not in EVENTS:
        return None
    kind = str(data["event"])
    try:
        if kind == "done":
            return PipeEvent(kind, done=_done(data))
        address, peer, path, reason = (data.get(k) for k in ("address", "peer", "path", "reason"))
        verified = data.get("verified")
        return PipeEvent(
            kind,
            address=None if address is None else fields.text(address, "address"),
            port=fields.whole(data.get("port"), "port", 0),
            peer=None if peer is None else fields.text(peer, "peer"),
            received=fields.whole(data.get("received"), "received", 0),
            written=fields.whole(data.get("written"), "written", 0),
            total=fields.whole(data.get("total"), "total", 0),
            seconds=fields.number(data.get("seconds"), "seconds", 0.0),
            path=None if path is None else fields.text(path, "path"),
            verified=None if verified is None else bool(verified),
            reason=None if reason is None else fields.text(reason, "reason"),
        )
    except ModelError:
        return None
