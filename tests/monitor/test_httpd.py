"""The /metrics HTTP server in this process: answers, keep-alive, bad requests, slow and
vanishing clients, the connection bound."""

from __future__ import annotations

import socket
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
