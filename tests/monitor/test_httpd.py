"""The /metrics HTTP server in this process: answers, keep-alive, bad requests, slow and
vanishing clients, the connection bound."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halo_cluster.errors import ListenError
from halo_cluster.monitor.httpd import MetricsServer, _header_end
from tests.conftest import free_port

BODY = b"halo_up 1\n"


def pages(target: str) -> tuple[int, str, bytes]:
    if target == "/boom":
        raise RuntimeError("a bug")
    if target.split("?")[0] == "/metrics":
        return 200, "text/plain; version=0.0.4", BODY
    return 404, "text/plain", b"only /metrics here\n"


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    srv = MetricsServer("127.0.0.1", free_port(), pages, max_connections=8, header_timeout_s=0.5)
    srv.start()
    yield srv
    srv.shutdown()
    time.sleep(0.3)
    srv.server_close()


def connect(srv: MetricsServer) -> socket.socket:
    return socket.create_connection(srv.server_address, timeout=5)


def exchange(sock: socket.socket, request: bytes) -> bytes:
    """Send a request and read until the server closes (or the timeout)."""
    sock.sendall(request)
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def response(status: str, body: bytes, ctype: str, connection: str = "close") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
        f"Connection: {connection}\r\n\r\n"
    ).encode() + body


OK_CLOSE = response("200 OK", BODY, "text/plain; version=0.0.4")
OK_KEEP = response("200 OK", BODY, "text/plain; version=0.0.4", "keep-alive")


def test_answers_keep_alive_pipelining_and_head(server: MetricsServer) -> None:
    with connect(server) as sock:
        # two requests in one packet (pipelined), then one that closes
        got = exchange(
            sock,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics?x=1 HTTP/1.1\r\n\r\n"
            b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n",
        )
    assert got == OK_KEEP + OK_KEEP + OK_CLOSE
    with connect(server) as sock:
        assert exchange(sock, b"GET /metrics HTTP/1.0\n\n") == OK_CLOSE  # bare newlines too
    with connect(server) as sock:
        head = exchange(sock, b"HEAD /metrics HTTP/1.0\r\n\r\n")
    assert head == OK_CLOSE[: -len(BODY)]  # the header says the length, no body follows


@pytest.mark.parametrize(
    ("request_bytes", "expected"),
    [
        (
            b"GET /nothing HTTP/1.0\r\n\r\n",
            response("404 Not Found", b"only /metrics here\n", "text/plain"),
        ),
        (
            b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
            response("405 Method Not Allowed", b"only GET here\n", "text/plain"),
        ),
        (b"GET /metrics\r\n\r\n", response("400 Bad Request", b"bad request\n", "text/plain")),
        (
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # TLS on a plain port
            response("400 Bad Request", b"bad request\n", "text/plain"),
        ),
        (
            b"GET /boom HTTP/1.1\r\n\r\n",
            response("500 Internal Server Error", b"error: RuntimeError\n", "text/plain"),
        ),
        (
            b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 9000,
            response(
                "431 Request Header Fields Too Large", b"request header too large\n", "text/plain"
            ),
        ),
    ],
)
def test_bad_requests_get_an_answer_and_the_server_stays(
    server: MetricsServer, request_bytes: bytes, expected: bytes
) -> None:
    with connect(server) as sock:
        assert exchange(sock, request_bytes) == expected
    with connect(server) as sock:
        assert exchange(sock, b"GET /metrics HTTP/1.0\r\n\r\n") == OK_CLOSE


def test_partial_requests_time_out_and_the_oldest_makes_room(server: MetricsServer) -> None:
    held = [connect(server) for _ in range(8)]  # the bound: 8 connections
    for sock in held:
        sock.sendall(b"GET /metr")
    time.sleep(0.1)
    with connect(server) as sock:  # a ninth: the oldest partial request is closed for it
        assert exchange(sock, b"GET /metrics HTTP/1.0\r\n\r\n") == OK_CLOSE
    assert held[0].recv(10) == b"" and server.evicted == 1
    time.sleep(0.8)  # past the header timeout: every other one is closed too
    assert [sock.recv(10) for sock in held[1:]] == [b""] * 7
    assert server.conns == {} and server.timed_out == 7
    for sock in held:
        sock.close()


def test_clients_that_vanish_mid_answer(server: MetricsServer) -> None:
    for _ in range(50):
        sock = connect(server)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        sock.close()  # RST: the answer meets a reset connection
    with connect(server) as sock:
        assert exchange(sock, b"GET /metrics HTTP/1.0\r\n\r\n") == OK_CLOSE
    time.sleep(0.1)
    assert server.conns == {}


def test_listen_errors_are_one_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ListenError) as err:
            MetricsServer("127.0.0.1", port, pages)
        assert str(err.value) == f"cannot listen on 127.0.0.1:{port}: Address already in use"
    with pytest.raises(ListenError, match=r"^cannot listen on no-such-host\.invalid:9877: "):
        MetricsServer("no-such-host.invalid", 9877, pages)
    with pytest.raises(ListenError) as err:
        MetricsServer("::1", 0, pages)
    assert str(err.value) == "cannot listen on [::1]:0: the port must be 1 to 65535"
    assert ListenError.exit_code == 2


@given(st.binary(max_size=400))
@settings(max_examples=300, deadline=None)
def test_any_request_head_gets_a_status_never_an_exception(head: bytes) -> None:
    srv = MetricsServer.__new__(MetricsServer)  # the parser only: no socket
    srv.pages, srv.served = pages, 0
    status, ctype, body, close, _method = srv._handle(head)
    assert status in (200, 400, 404, 405, 500) and ctype.startswith("text/plain")
    assert isinstance(body, bytes) and isinstance(close, bool)
    end = _header_end(bytearray(head))
    assert end == -1 or head[end : end + 2] in (b"\r\n", b"\n\n")


# -- issue 29 (N1): pipelining, slow readers, failures inside one connection -----------------
BIG = b"x" * (4 << 20)  # a page far larger than what the kernel buffers for one socket


def big_pages(target: str) -> tuple[int, str, bytes]:
    if target == "/str":
        return 200, "text/plain", "a str, not bytes"  # type: ignore[return-value]  # a bug
    if target == "/big":
        return 200, "text/plain", BIG
    return pages(target)


def until(condition: object, timeout_s: float = 10.0) -> None:
    """Wait for an observable state (never a guessed duration)."""
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the state never came"
        time.sleep(0.01)


def read_answers(sock: socket.socket, count: int) -> bytes:
    """Read until ``count`` answers have come (every answer here has the same size)."""
    chunks, size, want = [], 0, count * len(OK_KEEP)
    while size < want:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {size} of {want} bytes"
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /metrics HTTP/1.1\r\n\r\n",  # the repro's shape: 5000 of them would be 15000 frames
        b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 8000 + b"\r\n\r\n",  # just below the limit
    ],
    ids=["short", "8KB-header"],
)
def test_thousands_of_pipelined_requests_are_answered_in_a_loop(
    server: MetricsServer, request_bytes: bytes
) -> None:
    count = 5000 if len(request_bytes) < 100 else 200
    with connect(server) as sock:
        sender = threading.Thread(target=sock.sendall, args=(request_bytes * count,))
        sender.start()  # the server reads as it answers: send and read at once
        got = read_answers(sock, count)
        sender.join()
    assert got == OK_KEEP * count
    with connect(server) as sock:
        assert exchange(sock, b"GET /metrics HTTP/1.0\r\n\r\n") == OK_CLOSE
    assert server.failed == 0


def test_slow_readers_share_one_page_and_one_answer_each() -> None:
    """50 clients pipeline requests for a 4 MiB page and never read: each holds one answer,
    whose body is the page itself (a view, never a copy), and no more than MAX_INPUT_BYTES
    of its requests are read ahead; a normal scrape still answers."""
    from halo_cluster.monitor.httpd import MAX_INPUT_BYTES

    srv = MetricsServer("127.0.0.1", free_port(), big_pages, max_connections=64)
    thread = srv.start()
    clients = []
    for _ in range(50):
        sock = connect(srv)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            sock.send(b"GET /big HTTP/1.1\r\n\r\n" * 3000)  # 63 KB of requests, as far as it goes
        clients.append(sock)
    until(lambda: sum(1 for c in list(srv.conns.values()) if c.out) == 50)
    with connect(srv) as sock:
        assert exchange(sock, b"GET /metrics HTTP/1.0\r\n\r\n") == OK_CLOSE
    srv.shutdown()
    thread.join(10)
    held = list(srv.conns.values())
    try:
        assert len(held) == 50
        assert all(c.out[-1].obj is BIG for c in held)  # the page itself: one copy for all
        assert all(c.pending() <= len(BIG) + 100 for c in held)
        assert all(len(c.inbuf) <= MAX_INPUT_BYTES for c in held)
        assert all(c.requests == 1 for c in held)  # one answer at a time
    finally:
        srv.server_close()
        for sock in clients:
            sock.close()


def test_a_reader_that_falls_behind_is_closed() -> None:
    srv = MetricsServer("127.0.0.1", free_port(), big_pages, send_timeout_s=0.5)
    srv.start()
    try:
        with connect(srv) as slow:
            slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            slow.sendall(b"GET /big HTTP/1.1\r\n\r\n")
            until(lambda: srv.too_slow == 1)
            assert srv.conns == {}
            with connect(srv) as sock:
                assert exchange(sock, b"GET /metrics HTTP/1.0\r\n\r\n") == OK_CLOSE
    finally:
        srv.shutdown()
        srv.server_close()


def test_an_internal_error_closes_only_its_connection() -> None:
    logged: list[str] = []
    srv = MetricsServer("127.0.0.1", free_port(), big_pages, log=logged.append)
    srv.start()
    try:
        with connect(srv) as keep:  # a keep-alive connection that is fine throughout
            keep.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            assert read_answers(keep, 1) == OK_KEEP
            for _ in range(3):
                with connect(srv) as sock:
                    assert exchange(sock, b"GET /str HTTP/1.1\r\n\r\n") == b""  # closed
            keep.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            assert read_answers(keep, 1) == OK_KEEP
    finally:
        srv.shutdown()
        srv.server_close()
    assert srv.failed == 3
    assert logged == [  # once for the three identical failures
        "halo exporter: closed a connection after an internal error: TypeError: "
        "memoryview: a bytes-like object is required, not 'str'"
    ]
