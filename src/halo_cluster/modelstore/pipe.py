"""One hop of a model's transfer: bytes come in (from the source's files, or from the hop
before over TCP), are written to this node's store where it needs them, and go on to the
next hop while they arrive. A chain of hops costs about one copy however many nodes it has.

Every hop is started at once and listens; the source then gets the route (each hop's
address, port and one-time secret, in chain order). On each connection the upstream sends
the secret of the hop it reaches, then the rest of the route (one JSON line): the hop takes
its next hop from it and passes on what remains. Then the stream: the files of ``stream``
in order, each from its ``offset`` to its end, no framing (every hop got the list from the
controller). A listening hop binds one address (the node's fabric address), admits the
first peer that sends its secret (its own was given in the environment, never in argv),
then stops listening; it hears peers side by side, each for a few seconds at most, so one
that is silent or slow does not hold the door. Everything that arrives is hashed; a file is
renamed into place only when its sha256 is the manifest's (``store.Receiving``).

The spec, the route and the events are ``modelstore.transfer``'s typed values; events go to
``emit`` (the node prints each as a JSON line for the controller): ``listening``,
``admitted``, ``refused``, ``progress``, ``file``, ``forward-failed``, ``done``. Standard
library only, Python 3.9."""

from __future__ import annotations

import hmac
import json
import os
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator

from halo_cluster.errors import ModelError
from halo_cluster.modelstore.manifest import CHUNK, Manifest, read_chunks
from halo_cluster.modelstore.store import Receiving, Store
from halo_cluster.modelstore.transfer import (
    PipeDone,
    PipeEvent,
    PipeSpec,
    RouteHop,
    parse_route,
    route_line,
)

Emit = Callable[[PipeEvent], None]
SECRET_BYTES = 64  # hex of 32 random bytes
MAX_ROUTE = 1 << 20
PROGRESS_S = 0.5
AUTH_S = 5.0  # what one peer may take to send its secret (the real upstream sends it at once)
MAX_PENDING = 16  # peers heard at once


def new_secret() -> str:
    return os.urandom(SECRET_BYTES // 2).hex()


def listen_address(spec_value: str) -> str:
    """The address to listen on: as given, or ``ssh``: the address this node was reached at
    by the controller's SSH connection (the source is the controller's: it sends to the
    first hop over whatever reached it)."""
    if spec_value != "ssh":
        return spec_value
    parts = os.environ.get("SSH_CONNECTION", "").split()
    if len(parts) != 4:
        raise ModelError("no SSH connection to take the listening address from; set fabric_address")
    return parts[2]


class _Upstream:
    """The bytes of the stream, from a peer over TCP."""

    def __init__(self, address: str, secret: str, wait_s: float, idle_s: float, emit: Emit):
        self.idle_s = idle_s
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((address, 0))
            listener.listen(4)
            emit(PipeEvent("listening", address=address, port=listener.getsockname()[1]))
            self.conn = _admit(listener, secret.encode(), wait_s, emit)
        except OSError as err:
            raise ModelError(f"cannot listen on {address}: {err.strerror or err}") from None
        finally:
            listener.close()
        self.conn.settimeout(idle_s)
        self.buffer = bytearray(CHUNK)
        self.route = self._route()

    def _route(self) -> tuple[RouteHop, ...]:
        """The hops after this one, as the upstream sent them (one JSON line)."""
        line = b""
        while not line.endswith(b"\n"):
            try:
                more = self.conn.recv(1)
            except OSError as err:
                raise ModelError(f"the hop before sent no route ({err})") from None
            if not more or len(line) > MAX_ROUTE:
                raise ModelError("the hop before sent no route")
            line += more
        try:
            return parse_route(json.loads(line))
        except (ValueError, RecursionError):
            raise ModelError("the hop before sent a route that is not JSON") from None
        except ModelError as err:
            raise ModelError(f"the hop before sent a bad route: {err}") from None

    def chunks(self, path: str, start: int, end: int) -> Iterator[memoryview]:
        view = memoryview(self.buffer)
        left = end - start
        while left > 0:
            try:
                got = self.conn.recv_into(view[: min(CHUNK, left)])
            except socket.timeout:
                raise ModelError(f"{path}: nothing came for {self.idle_s:g} s") from None
            except OSError as err:
                raise ModelError(f"{path}: the hop before failed ({err.strerror or err})") from None
            if got == 0:
                raise ModelError(f"{path}: the hop before closed {left} B before the end")
            left -= got
            yield view[:got]

    def close(self) -> None:
        self.conn.close()


def _admit(listener: socket.socket, secret: bytes, wait_s: float, emit: Emit) -> socket.socket:
    """The first peer that sends ``secret`` within ``wait_s``. Peers are heard side by side,
    each for at most ``AUTH_S`` (and no later than the wait's end): one that is silent, or
    sends a byte at a time, costs its own time, not the hop's; at most ``MAX_PENDING`` are
    heard at once (a newer one makes the oldest give way)."""
    deadline = time.monotonic() + wait_s
    listener.setblocking(False)
    pending: dict[socket.socket, _Pending] = {}
    with selectors.DefaultSelector() as selector:
        selector.register(listener, selectors.EVENT_READ)
        try:
            while True:
                now = time.monotonic()
                for conn in [c for c, p in pending.items() if p.until <= now]:
                    _refuse(selector, pending, conn, emit)
                if now >= deadline:
                    raise ModelError(f"no peer came within {wait_s:g} s")
                until = min([deadline, *(p.until for p in pending.values())])
                for key, _mask in selector.select(max(until - now, 0.001)):
                    if key.fileobj is listener:
                        _accept(listener, selector, pending, emit)
                        continue
                    sock = key.fileobj
                    if isinstance(sock, socket.socket) and _heard(sock, pending[sock], secret):
                        selector.unregister(sock)
                        peer = pending.pop(sock).peer
                        sock.setblocking(True)
                        emit(PipeEvent("admitted", peer=peer))
                        return sock
        finally:
            for conn in list(pending):
                _refuse(selector, pending, conn, emit)


class _Pending:
    """A peer being heard: where it is from, what it said, until when it may say it."""

    def __init__(self, peer: str, until: float) -> None:
        self.peer, self.until, self.said = peer, until, b""


def _accept(
    listener: socket.socket,
    selector: selectors.BaseSelector,
    pending: dict[socket.socket, _Pending],
    emit: Emit,
) -> None:
    try:
        conn, peer = listener.accept()
    except (BlockingIOError, InterruptedError, ConnectionAbortedError):
        return
    if len(pending) >= MAX_PENDING:
        oldest = min(pending, key=lambda c: pending[c].until)
        _refuse(selector, pending, oldest, emit)
    conn.setblocking(False)
    pending[conn] = _Pending(str(peer[0]), time.monotonic() + AUTH_S)
    selector.register(conn, selectors.EVENT_READ)


def _heard(conn: socket.socket, pending: _Pending, secret: bytes) -> bool:
    """True when ``conn`` has sent ``secret`` and its newline; the first byte after them is
    the route's, left unread. A wrong secret, a hang-up or an error ends the hearing (the
    peer is then refused at once: its time is up)."""
    try:
        more = conn.recv(SECRET_BYTES + 1 - len(pending.said))
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        more = b""
    pending.said += more
    if more and len(pending.said) <= SECRET_BYTES and b"\n" not in more:
        return False  # more to come
    if hmac.compare_digest(pending.said, secret + b"\n"):
        return True
    pending.until = 0.0
    return False


def _refuse(
    selector: selectors.BaseSelector,
    pending: dict[socket.socket, _Pending],
    conn: socket.socket,
    emit: Emit,
) -> None:
    selector.unregister(conn)
    emit(PipeEvent("refused", peer=pending.pop(conn).peer))
    conn.close()


class _Files:
    """The bytes of the stream, from the source's own files."""

    def __init__(self, paths: dict[str, str]) -> None:
        self.paths = paths

    def chunks(self, path: str, start: int, end: int) -> Iterator[memoryview]:
        real = self.paths.get(path)
        if real is None:
            raise ModelError(f"{path}: not in the source")
        for chunk in read_chunks(real, start, end):
            yield memoryview(chunk)

    def close(self) -> None:
        return None


def _downstream(route: tuple[RouteHop, ...], emit: Emit) -> socket.socket | None:
    """A connection to the next hop of ``route``, given its secret and the rest of the route;
    None (and a ``forward-failed`` event) when it cannot be reached."""
    if not route:
        return None
    target, rest = route[0], route[1:]
    try:
        conn = socket.create_connection((target.address, target.port), timeout=30)
        conn.sendall(target.secret.encode() + b"\n" + route_line(rest))
        conn.settimeout(120)
    except OSError as err:
        why = f"{target.address}:{target.port}: {err.strerror or err}"
        emit(PipeEvent("forward-failed", reason=why))
        return None
    return conn


def relay(spec: PipeSpec, emit: Emit) -> PipeDone:
    """Run one hop as ``spec`` says; how it ended (also emitted, as ``done``): what this hop
    verified, what failed and why, whether it forwarded everything."""
    manifest = spec.manifest
    want = spec.want
    entries = manifest.by_path()
    store = Store(spec.store) if spec.store and spec.target else None
    refused: str | None = None  # this node's store cannot take the model: it only forwards
    if store is not None:
        try:
            store.ensure()
            store.invalidate(manifest.name)
        except ModelError as err:
            refused = str(err)
    started = time.monotonic()
    verified: list[str] = []
    failed: dict[str, str] = {}
    total = sum(f.size - f.offset for f in spec.stream)
    counts = {"received": 0, "written": 0}
    source: _Files | _Upstream | None = None
    forward: socket.socket | None = None
    forward_error: str | None = None
    error: str | None = None
    last = [0.0]

    def progress(final: bool = False) -> None:
        now = time.monotonic()
        if final or now - last[0] >= PROGRESS_S:
            last[0] = now
            emit(
                PipeEvent(
                    "progress",
                    received=counts["received"],
                    written=counts["written"],
                    total=total,
                    seconds=now - started,
                )
            )

    route: tuple[RouteHop, ...] = ()
    finisher = _Finisher(verified, failed, emit)
    try:
        if spec.files is not None:
            source = _Files(spec.files)
            route = spec.route
        else:
            source = _Upstream(
                listen_address(str(spec.listen)), spec.secret, spec.wait_s, spec.idle_s, emit
            )
            route = source.route
        forward = _downstream(route, emit)
        if route and forward is None:
            forward_error = "could not connect"
        disk_error: str | None = refused
        for item in spec.stream:
            path, start, size = item.path, item.offset, item.size
            entry = entries.get(path)
            if entry is None:
                raise ModelError(f"{path}: in the stream but not in the manifest")
            mine = want.get(path)
            receiving: Receiving | None = None
            if store is not None and mine is not None and disk_error is None:
                try:
                    receiving = Receiving(
                        store, manifest.name, path, entry.size, entry.sha256, mine
                    )
                except (OSError, ModelError) as err:
                    disk_error = _why(err)
                    failed[path] = disk_error
            position = start
            for chunk in source.chunks(path, start, size):
                if forward is not None:
                    try:
                        forward.sendall(chunk)
                    except OSError as err:
                        forward_error = err.strerror or str(err)
                        emit(PipeEvent("forward-failed", reason=forward_error))
                        forward.close()
                        forward = None
                end = position + len(chunk)
                if receiving is not None and end > receiving.written:
                    before = receiving.written
                    try:
                        receiving.write(chunk[before - position :])
                        counts["written"] += end - before
                    except OSError as err:  # a full disk: this node stops writing, not forwarding
                        disk_error = _why(err)
                        failed[path] = disk_error
                        receiving.close()
                        receiving = None
                position = end
                counts["received"] += len(chunk)
                progress()
            if receiving is not None:
                finisher.put(receiving)  # fsync and rename while the stream goes on
    except ModelError as err:
        error = str(err)
    finally:
        finisher.wait()
        if forward is not None:
            forward.close()
        if source is not None:
            source.close()
    complete: bool | None = None if store is None else False
    error = error or refused
    if store is not None and error is None and not failed:
        error = _complete(store, manifest)
        complete = error is None
    progress(final=True)
    done = PipeDone(
        tuple(verified),
        failed,
        error,
        forward_error is None,
        forward_error,
        complete,
        counts["received"],
        counts["written"],
        time.monotonic() - started,
    )
    emit(PipeEvent("done", done=done))
    return done


class _Finisher:
    """Files received whole, made durable (fsync), checked and renamed into place on a
    thread of their own: a hop keeps reading and forwarding meanwhile, so a slow disk does
    not stall the chain behind it between files."""

    def __init__(self, verified: list[str], failed: dict[str, str], emit: Emit) -> None:
        self.verified, self.failed, self.emit = verified, failed, emit
        self.queue: queue.Queue[Receiving | None] = queue.Queue()
        self.thread: threading.Thread | None = None

    def put(self, receiving: Receiving) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        self.queue.put(receiving)

    def wait(self) -> None:
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join()

    def _run(self) -> None:
        while True:
            receiving = self.queue.get()
            if receiving is None:
                return
            path = receiving.rel
            try:
                receiving.finish()
                self.verified.append(path)
                self.emit(PipeEvent("file", path=path, verified=True))
            except (OSError, ModelError) as err:
                self.failed[path] = _why(err)
                self.emit(PipeEvent("file", path=path, verified=False, reason=self.failed[path]))


def _complete(store: Store, manifest: Manifest) -> str | None:
    """None when every file of the manifest is in place with its sha256 (the ones this hop
    did not receive were checked by the controller's plan; checked again here, by stat),
    and the store now marks the model complete; otherwise the reason."""
    try:
        present = store.present(manifest.name, hash_stale=True)
    except ModelError as err:  # a link put where the model is, while it was received
        return str(err)
    for entry in manifest.files:
        found = present.get(entry.path)
        if found is None or found["sha256"] != entry.sha256:
            return f"{entry.path}: not in place after the transfer"
    try:
        store.complete(manifest)
    except ModelError as err:
        return str(err)
    except OSError as err:
        return f"cannot mark {manifest.name} complete: {err.strerror or err}"
    return None


def _why(err: BaseException) -> str:
    if isinstance(err, OSError):
        where = f"{err.filename}: " if err.filename else ""
        return f"{where}{err.strerror or err}"
    return str(err)
