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
import selectors
import socket
import time
from collections.abc import Callable

from halo_cluster.errors import ModelError
from halo_cluster.modelstore.manifest import Manifest, open_regular
from halo_cluster.modelstore.sink import Blocks, Sink
from halo_cluster.modelstore.store import Store
from halo_cluster.modelstore.transfer import (
    PipeDone,
    PipeEvent,
    PipeSpec,
    RouteHop,
    StreamFile,
    parse_route,
    route_line,
)

Emit = Callable[[PipeEvent], None]
SECRET_BYTES = 64  # hex of 32 random bytes
MAX_ROUTE = 1 << 20
PROGRESS_S = 0.5
AUTH_S = 5.0  # what one peer may take to send its secret (the real upstream sends it at once)
MAX_PENDING = 16  # peers heard at once
SHORTER = "shorter than the manifest says (changed while read?)"
SENDFILE_PIECE = 64 << 20  # a source's sendfile, between two looks at the progress


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

    def fill(self, path: str, block: bytearray, length: int) -> tuple[int, str | None]:
        """``block[:length]``: the stream's next ``length`` bytes (of ``path``); how many came
        and, when the stream broke before all did, why."""

        def broke(err: OSError | None, left: int) -> str:
            if isinstance(err, socket.timeout):
                return f"{path}: nothing came for {self.idle_s:g} s"
            if err is not None:
                return f"{path}: the hop before failed ({err.strerror or err})"
            return f"{path}: the hop before closed {left} B before the end"

        return _fill(block, length, self.conn.recv_into, broke)

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
        self._fd: int | None = None
        self._path = ""

    def open(self, path: str, start: int) -> int:
        """``path`` opened (a regular file, read from ``start`` on): its descriptor."""
        real = self.paths.get(path)
        if real is None:
            raise ModelError(f"{path}: not in the source")
        self.close()
        self._fd, self._path = open_regular(real), path
        os.lseek(self._fd, start, os.SEEK_SET)
        return self._fd

    def fill(self, path: str, block: bytearray, length: int) -> tuple[int, str | None]:
        assert self._fd is not None and self._path == path
        fd = self._fd

        def broke(err: OSError | None, _left: int) -> str:
            if err is not None:
                return f"{path}: {err.strerror or err}"
            return f"{path}: {SHORTER}"

        return _fill(block, length, lambda view: os.readv(fd, [view]), broke)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _fill(
    block: bytearray,
    length: int,
    read: Callable[[memoryview], int],
    broke: Callable[[OSError | None, int], str],
) -> tuple[int, str | None]:
    """``block[:length]`` filled by as many ``read`` calls as it takes; how many bytes came
    and, when the source ended or failed first, ``broke``'s line (its error or None, and the
    bytes it still owed)."""
    view = memoryview(block)
    got = 0
    while got < length:
        try:
            more = read(view[got:length])
        except OSError as err:  # socket.timeout too
            return got, broke(err, length - got)
        if more == 0:
            return got, broke(None, length - got)
        got += more
    return got, None


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
    store = Store(spec.store) if spec.store and spec.target else None
    refused: str | None = None  # this node's store cannot take the model: it only forwards
    if store is not None:
        try:
            store.ensure()
            store.invalidate(manifest.name)
        except ModelError as err:
            refused = str(err)
    started, cpu_started = time.monotonic(), _cpu_s()
    blocks = Blocks()
    sink = Sink(store, manifest.name, spec.want, blocks, emit, refused)
    total = sum(f.size - f.offset for f in spec.stream)
    source: _Files | _Upstream | None = None
    hop: _Pass | None = None
    error: str | None = None
    try:
        if spec.files is not None:
            source = _Files(spec.files)
            route = spec.route
        else:
            source = _Upstream(
                listen_address(str(spec.listen)), spec.secret, spec.wait_s, spec.idle_s, emit
            )
            route = source.route
        hop = _Pass(source, _downstream(route, emit), sink, blocks, spec.idle_s, emit, total)
        if route and hop.forward is None:
            hop.forward_error = "could not connect"
        hop.run(spec.stream, manifest)
    except ModelError as err:
        error = str(err)
    finally:
        sink.close(spec.idle_s)
        if hop is not None:
            hop.close()
        if source is not None:
            source.close()
    complete: bool | None = None if store is None else False
    error = error or refused
    if store is not None and error is None and not sink.failed:
        error = _complete(store, manifest)
        complete = error is None
    received = hop.received if hop is not None else 0
    forward_error = hop.forward_error if hop is not None else None
    if hop is not None:  # the stream's time, from its first peer admitted (not the wait for it)
        started = hop.started
    emit(_progress(received, sink.written, total, time.monotonic() - started))
    done = PipeDone(
        tuple(sink.verified),
        dict(sink.failed),
        error,
        forward_error is None,
        forward_error,
        complete,
        received,
        sink.written,
        time.monotonic() - started,
        round(_cpu_s() - cpu_started, 3),
    )
    emit(PipeEvent("done", done=done))
    return done


def _progress(received: int, written: int, total: int, seconds: float) -> PipeEvent:
    return PipeEvent("progress", received=received, written=written, total=total, seconds=seconds)


def _cpu_s() -> float:
    """This process's CPU seconds so far, user and system (a node's hop is a process of its
    own; the source hop on the controller counts the controller's)."""
    times = os.times()
    return times.user + times.system


class _Pass:
    """One hop's pass over the stream: each file's bytes read from the source into a block,
    handed to the sink where this node keeps the file, and forwarded to the next hop. A
    source that keeps nothing hands its files to the kernel (sendfile: no copy here)."""

    def __init__(
        self,
        source: _Files | _Upstream,
        forward: socket.socket | None,
        sink: Sink,
        blocks: Blocks,
        idle_s: float,
        emit: Emit,
        total: int,
    ) -> None:
        self.source, self.forward, self.sink, self.blocks = source, forward, sink, blocks
        self.idle_s, self.emit, self.total = idle_s, emit, total
        self.forward_error: str | None = None
        self.received = 0
        self.started = self.last = time.monotonic()
        self._spare: bytearray | None = None  # a block of its own, once the sink is left behind

    def run(self, stream: tuple[StreamFile, ...], manifest: Manifest) -> None:
        entries = manifest.by_path()
        for item in stream:
            entry = entries.get(item.path)
            if entry is None:
                raise ModelError(f"{item.path}: in the stream but not in the manifest")
            keeps = self.sink.keeps(item.path)
            if isinstance(self.source, _Files):
                fd = self.source.open(item.path, item.offset)
                if not keeps:
                    self._send_file(fd, item)
                    continue
            if keeps:
                self.sink.open(item.path, entry.size, entry.sha256)
            self._blocks(item, keeps)
            if keeps:
                self.sink.end()

    def _blocks(self, item: StreamFile, keeps: bool) -> None:
        position = item.offset
        while position < item.size:
            block = self._block(keeps)
            got, broke = self.source.fill(item.path, block, min(len(block), item.size - position))
            if block is not self._spare:
                self.sink.feed(block, got, position)  # before forwarding: both at once
            self._send(memoryview(block)[:got])
            position += got
            self._count(got)
            if broke is not None:  # what came is written and forwarded: a resume starts there
                raise ModelError(broke)

    def _block(self, keeps: bool) -> bytearray:
        while keeps and not self.sink.left_behind:
            since = self.blocks.given
            block = self.blocks.take(self.idle_s)
            if block is not None:
                return block
            if self.sink.stalled(since):  # its files fail, named; the stream goes on
                self.sink.abandon(self.idle_s)
        if self._spare is None:
            self._spare = bytearray(self.blocks.size)
        return self._spare

    def _send(self, view: memoryview) -> None:
        if self.forward is None:
            return
        try:
            self.forward.sendall(view)
        except OSError as err:
            self._forward_failed(err)

    def _send_file(self, fd: int, item: StreamFile) -> None:
        """``item`` from the source's file straight to the next hop (the kernel's sendfile),
        in pieces so that progress is told as it goes."""
        position = item.offset
        with os.fdopen(fd, "rb", buffering=0, closefd=False) as handle:
            while position < item.size and self.forward is not None:
                count = min(SENDFILE_PIECE, item.size - position)
                try:
                    sent = self.forward.sendfile(handle, position, count)
                except OSError as err:
                    self._forward_failed(err)
                    break
                if sent < count:
                    raise ModelError(f"{item.path}: {SHORTER}")
                position += sent
                self._count(sent)
        if self.forward is None:  # nowhere to send: nothing to read
            self._count(item.size - position)

    def _forward_failed(self, err: OSError) -> None:
        self.forward_error = err.strerror or str(err) or type(err).__name__
        self.emit(PipeEvent("forward-failed", reason=self.forward_error))
        if self.forward is not None:
            self.forward.close()
        self.forward = None

    def _count(self, length: int) -> None:
        self.received += length
        now = time.monotonic()
        if now - self.last >= PROGRESS_S:
            self.last = now
            self.emit(_progress(self.received, self.sink.written, self.total, now - self.started))

    def close(self) -> None:
        if self.forward is not None:
            self.forward.close()


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
