"""A small HTTP/1.1 server for ``/metrics``: one thread, non-blocking sockets.

Why not ``http.server``: it spends a thread per connection and waits without limit for a
request that never completes. A flood of connections that send half a request overflows its
accept backlog (normal scrapes then wait for SYN retransmits: seconds), fills the descriptor
table, and every client that hangs up early prints a traceback.

Here a connection is a buffer. The accept queue is drained as fast as connections come;
a request is answered as soon as its header is complete; a connection that has not sent its
request within ``header_timeout_s`` (or idles longer than ``idle_timeout_s`` between
requests) is closed; the number of connections is bounded, and when it is reached the
connection whose client has moved least recently makes room: the one waiting longest without
a request, or whose answer the client has stopped taking for longest (a client that
pipelines requests and never reads holds a slot only until someone needs it, so scrapes
are answered however many of those there are); a client that goes away is simply closed.
Nothing is ever printed for a client's behaviour.

What one connection may cost is bounded too. Pipelined requests are answered one after the
other in a loop (never by recursion), one answer at a time: while an answer is unsent the
connection is not read (TCP flow control then stops the client), and at most
``MAX_INPUT_BYTES`` of requests wait unanswered. An answer is its own small header and a
view of the page the handler returned, never a copy: slow readers of the same page share
one copy of it. A reader that has not taken its answer within ``send_timeout_s`` has fallen
too far behind and is closed, so the pages held for slow readers are those of the last few
seconds only. A failure inside one connection's handling closes that connection (one line
in the log), never the server.
"""

from __future__ import annotations

import contextlib
import errno
import resource
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from halo_cluster.errors import ListenError

MAX_HEADER_BYTES = 8192
MAX_INPUT_BYTES = 2 * MAX_HEADER_BYTES  # requests read ahead of their answers, at most
ACCEPTS_PER_WAKE = 256
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}

# path -> (status, content type, body)
Pages = Callable[[str], tuple[int, str, bytes]]
Log = Callable[[str], None]


def default_max_connections() -> int:
    """A quarter of the descriptors this process may have, at most 1024."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1024
    return max(16, min(1024, soft // 4))


def log_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class _Conn:
    sock: socket.socket
    deadline: float
    since: float  # when its client last moved: connected, finished a request, took bytes
    inbuf: bytearray = field(default_factory=bytearray)
    # the answer being sent: its header and a view of the (shared) page, what is left of them
    out: list[memoryview] = field(default_factory=list)
    close_after: bool = False
    requests: int = 0
    events: int = selectors.EVENT_READ
    closed: bool = False

    def pending(self) -> int:
        """Bytes of the answer not yet taken by the kernel."""
        return sum(len(view) for view in self.out)


class MetricsServer:
    def __init__(
        self,
        address: str,
        port: int,
        pages: Pages,
        max_connections: int | None = None,
        header_timeout_s: float = 5.0,
        idle_timeout_s: float = 60.0,
        send_timeout_s: float = 10.0,
        log: Log = log_stderr,
    ) -> None:
        self.pages = pages
        self.max_connections = max_connections or default_max_connections()
        self.header_timeout_s = header_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.send_timeout_s = send_timeout_s  # Prometheus's own default scrape timeout
        self.log = log
        self.listener = _listen(address, port)
        self.server_address: tuple[str, int] = self.listener.getsockname()[:2]
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, self._wake_r)
        self.conns: dict[int, _Conn] = {}
        self._listening = True
        self._resume_at = 0.0
        self._stop = threading.Event()
        self._last_error = ""
        self.served = 0
        self.evicted = 0
        self.timed_out = 0
        self.too_slow = 0  # readers closed for not taking their answer in time
        self.failed = 0  # connections closed after an internal error

    # -- life -------------------------------------------------------------------------------
    def serve_forever(self, poll_s: float = 0.25) -> None:
        while not self._stop.is_set():
            for key, mask in self.selector.select(poll_s):
                try:
                    if key.data is None:
                        self._accept()
                    elif key.data is self._wake_r:
                        _drain(self._wake_r)
                    else:
                        self._ready(key.data, mask)
                except Exception as err:  # a bug costs one connection (or one wake), never all
                    self._failed(err, key.data if isinstance(key.data, _Conn) else None)
            try:
                self._sweep(time.monotonic())
            except Exception as err:
                self._failed(err, None)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="halo-http", daemon=True)
        thread.start()
        return thread

    def shutdown(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def server_close(self) -> None:
        for conn in list(self.conns.values()):
            self._close(conn)
        for sock in (self.listener, self._wake_r, self._wake_w):
            sock.close()
        self.selector.close()

    def _failed(self, err: BaseException, conn: _Conn | None) -> None:
        """One line for an internal error (once in a row per distinct text); the connection
        it happened on is closed."""
        self.failed += 1
        if conn is not None:
            with contextlib.suppress(Exception):
                self._close(conn)
        text = f"halo exporter: closed a connection after an internal error: {type(err).__name__}"
        text = f"{text}: {err}"[:300]
        if text != self._last_error:
            self._last_error = text
            with contextlib.suppress(Exception):
                self.log(text.encode("unicode_escape").decode())

    # -- connections ------------------------------------------------------------------------
    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                sock, _peer = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as err:
                if err.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # out of descriptors: make room, or stop accepting for a moment
                    if not self._evict():
                        self._pause()
                    return
                continue  # ECONNABORTED and friends: that client is gone already
            if len(self.conns) >= self.max_connections and not self._evict():
                sock.close()  # every connection is busy answering: refuse this one
                continue
            sock.setblocking(False)
            now = time.monotonic()
            conn = _Conn(sock, now + self.header_timeout_s, now)
            self.conns[sock.fileno()] = conn
            self.selector.register(sock, selectors.EVENT_READ, conn)

    def _evict(self) -> bool:
        """Close the connection whose client moved least recently (see ``since``): one
        waiting without a request, or one that stopped taking its answer; False when there
        is none."""
        if not self.conns:
            return False
        self._close(min(self.conns.values(), key=lambda c: c.since))
        self.evicted += 1
        return True

    def _pause(self) -> None:
        if self._listening:
            self.selector.unregister(self.listener)
            self._listening = False
            self._resume_at = time.monotonic() + 0.05

    def _sweep(self, now: float) -> None:
        if not self._listening and now >= self._resume_at:
            self.selector.register(self.listener, selectors.EVENT_READ, None)
            self._listening = True
        for conn in [c for c in self.conns.values() if c.deadline <= now]:
            if conn.out:
                self.too_slow += 1
            else:
                self.timed_out += 1
            self._close(conn)

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        fd = conn.sock.fileno()
        if self.conns.get(fd) is conn:
            del self.conns[fd]
            self.selector.unregister(conn.sock)
        conn.sock.close()
        conn.out = []

    def _ready(self, conn: _Conn, mask: int) -> None:
        try:
            if mask & selectors.EVENT_WRITE:
                self._send(conn)
            elif mask & selectors.EVENT_READ and not self._read(conn):
                return
            self._serve(conn)
        except OSError:  # reset, broken pipe: the client went away
            self._close(conn)

    def _read(self, conn: _Conn) -> bool:
        """Take what the client sent (at most up to MAX_INPUT_BYTES buffered); False when it
        hung up."""
        data = conn.sock.recv(max(1, MAX_INPUT_BYTES - len(conn.inbuf)))
        if not data:
            self._close(conn)
            return False
        if not conn.inbuf:  # the first bytes of a request: it must be complete in time
            conn.deadline = min(conn.deadline, time.monotonic() + self.header_timeout_s)
        conn.inbuf += data
        return True

    def _serve(self, conn: _Conn) -> None:
        """Answer the requests waiting in the buffer, one after the other, for as long as
        the kernel takes the answers; then wait for the client (to read, or to send)."""
        while not conn.closed and not conn.out:
            end = _header_end(conn.inbuf)
            if end >= 0:
                head = bytes(conn.inbuf[:end])
                del conn.inbuf[: _skip_blank(conn.inbuf, end)]
                status, ctype, body, close, method = self._handle(head)
                self._queue(
                    conn, status, ctype, b"" if method == "HEAD" else body, close, len(body)
                )
            elif len(conn.inbuf) > MAX_HEADER_BYTES:
                self._queue(conn, 431, "text/plain", b"request header too large\n", True)
            else:
                break
            self._send(conn)
        if not conn.closed:
            self._want(conn, selectors.EVENT_WRITE if conn.out else selectors.EVENT_READ)

    def _want(self, conn: _Conn, events: int) -> None:
        if conn.events != events:
            self.selector.modify(conn.sock, events, conn)
            conn.events = events

    def _handle(self, head: bytes) -> tuple[int, str, bytes, bool, str]:
        lines = head.decode("latin-1").split("\n")
        words = lines[0].strip().split()
        if len(words) != 3 or not words[2].startswith("HTTP/1."):
            return 400, "text/plain", b"bad request\n", True, ""
        method, target, version = words
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        connection = headers.get("connection", "")
        close = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
        if "content-length" in headers or "transfer-encoding" in headers:
            close = True  # a body we will not read: answer, then hang up
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"only GET here\n", True, method
        try:
            status, ctype, body = self.pages(target)
        except Exception as err:  # a bug must cost one scrape, never the server
            return 500, "text/plain", f"error: {type(err).__name__}\n".encode(), True, method
        self.served += 1
        return status, ctype, body, close, method

    def _queue(
        self,
        conn: _Conn,
        status: int,
        ctype: str,
        body: bytes,
        close: bool,
        length: int | None = None,
    ) -> None:
        """The answer to send: a header of its own and a view of the body (not a copy)."""
        header = (
            f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\n"
            f"Content-Type: {ctype}\r\nContent-Length: {len(body) if length is None else length}"
            f"\r\n{'Connection: close' if close else 'Connection: keep-alive'}\r\n\r\n"
        ).encode()
        conn.out = [memoryview(header), memoryview(body)] if body else [memoryview(header)]
        conn.close_after = close
        conn.requests += 1
        conn.deadline = time.monotonic() + self.send_timeout_s  # taken by then, or closed

    def _send(self, conn: _Conn) -> None:
        """Hand the kernel what it takes of the answer; when all of it is gone, close or
        wait for the next request."""
        sent = conn.sock.sendmsg(conn.out)
        now = time.monotonic()
        if sent:
            conn.since = now
        while conn.out and sent >= len(conn.out[0]):
            sent -= len(conn.out.pop(0))
        if conn.out:
            conn.out[0] = conn.out[0][sent:]
            return
        if conn.close_after:
            self._close(conn)
            return
        # a pipelined request already begun must be complete in time; else the idle limit
        conn.deadline = now + (self.header_timeout_s if conn.inbuf else self.idle_timeout_s)


def _listen(address: str, port: int) -> socket.socket:
    where = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    if not 0 < port < 65536:
        raise ListenError(f"cannot listen on {where}: the port must be 1 to 65535")
    try:
        family, kind, proto, _name, sockaddr = socket.getaddrinfo(
            address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as err:
        raise ListenError(f"cannot listen on {where}: {getattr(err, 'strerror', err)}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(4096)  # the kernel caps it at net.core.somaxconn
    except OSError as err:
        sock.close()
        raise ListenError(f"cannot listen on {where}: {err.strerror or err}") from None
    sock.setblocking(False)
    return sock


def _header_end(buf: bytearray) -> int:
    """Where the request header ends (before its blank line), or -1."""
    crlf, lf = buf.find(b"\r\n\r\n"), buf.find(b"\n\n")
    found = [i for i in (crlf, lf) if i >= 0]
    return min(found) if found else -1


def _skip_blank(buf: bytearray, end: int) -> int:
    return end + (4 if buf[end : end + 4] == b"\r\n\r\n" else 2)


def _drain(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while sock.recv(4096):
            pass
