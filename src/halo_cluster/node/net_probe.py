"""The built-in TCP probe: a ping-pong (latency) and a stream (bandwidth) between two nodes,
used by ``halo bench net`` where sockperf / qperf / iperf3 are not installed.

One server answers both: a client's first byte chooses the mode. ``P`` then a 4-byte size:
every message of that size is sent back. ``S``: everything is read and thrown away, and at
the end of the stream the byte count goes back as 8 bytes. Results are reported like the
peer tools: latency one way (half the round trip), bandwidth in Gb/s.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

from halo_cluster.stats import quantile  # nearest rank, as everywhere in halo
from halo_cluster.wire.answers import Ping, Stream

PING, STREAM = b"P", b"S"
CHUNK = 1 << 20


def _recv_exact(conn: socket.socket, view: memoryview) -> bool:
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:])
        if n == 0:
            return False
        got += n
    return True


def _serve_one(conn: socket.socket) -> None:
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mode = conn.recv(1)
        if mode == PING:
            header = bytearray(4)
            if not _recv_exact(conn, memoryview(header)):
                return
            (size,) = struct.unpack("!I", header)
            buffer = bytearray(max(1, min(size, CHUNK)))
            view = memoryview(buffer)[:size]
            recv_into, send = conn.recv_into, conn.sendall
            while True:  # the hot loop: one recv and one send per message when it fits
                got = recv_into(view)
                if got == 0:
                    return
                if got < size and not _recv_exact(conn, view[got:]):
                    return
                send(view)
        elif mode == STREAM:
            buffer = bytearray(CHUNK)
            total = 0
            while True:
                n = conn.recv_into(buffer)
                if n == 0:
                    break
                total += n
            conn.sendall(struct.pack("!Q", total))


def serve(address: str, port: int, limit_s: float) -> None:
    """Answer clients (one thread each) until ``limit_s`` has passed."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, port))
        listener.listen(64)
        deadline = time.monotonic() + limit_s
        while (left := deadline - time.monotonic()) > 0:
            listener.settimeout(min(left, 1.0))
            try:
                conn, _peer = listener.accept()
            except socket.timeout:  # not TimeoutError before Python 3.10
                continue
            conn.settimeout(None)
            threading.Thread(target=_serve_one, args=(conn,), daemon=True).start()


def _connect(address: str, port: int, timeout_s: float) -> socket.socket:
    conn = socket.create_connection((address, port), timeout=timeout_s)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def ping(address: str, port: int, seconds: float, size: int = 64, timeout_s: float = 5.0) -> Ping:
    """Round trips of ``size`` bytes for ``seconds``; latency reported one way (RTT / 2)."""
    with _connect(address, port, timeout_s) as conn:
        conn.sendall(PING + struct.pack("!I", size))
        payload = b"x" * size
        back = memoryview(bytearray(size))
        for _ in range(50):  # warm-up: caches, the peer's thread, the TCP state
            conn.sendall(payload)
            if not _recv_exact(conn, back):
                raise ConnectionError("the probe server closed the connection")
        rtts: list[float] = []
        clock, send, recv_into, add = time.perf_counter, conn.sendall, conn.recv_into, rtts.append
        end = clock() + seconds
        start = clock()
        while start < end:  # the hot loop: one clock read per round trip
            send(payload)
            got = recv_into(back)
            if got < size and (got == 0 or not _recv_exact(conn, back[got:])):
                raise ConnectionError("the probe server closed the connection")
            now = clock()
            add(now - start)
            start = now
    p50, p99 = quantile(rtts, 0.50) or 0.0, quantile(rtts, 0.99) or 0.0
    average = sum(rtts) / len(rtts) if rtts else 0.0  # none when ``seconds`` is not above 0
    return Ping(size, len(rtts), p50 / 2 * 1e6, p99 / 2 * 1e6, average / 2 * 1e6)


def stream(
    address: str, port: int, seconds: float, streams: int = 4, timeout_s: float = 5.0
) -> Stream:
    """``streams`` parallel TCP streams for ``seconds``; the bytes the server counted, in Gb/s."""
    counted: list[int] = []
    errors: list[str] = []

    def one() -> None:
        try:
            with _connect(address, port, timeout_s) as conn:
                conn.sendall(STREAM)
                block = b"\0" * CHUNK
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    conn.sendall(block)
                conn.shutdown(socket.SHUT_WR)
                reply = bytearray(8)
                if not _recv_exact(conn, memoryview(reply)):
                    raise ConnectionError("no byte count from the probe server")
                counted.append(struct.unpack("!Q", reply)[0])
        except OSError as err:
            errors.append(str(err))

    start = time.monotonic()
    threads = [threading.Thread(target=one) for _ in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.monotonic() - start
    if errors:
        raise ConnectionError(errors[0])
    return Stream(streams, sum(counted) * 8 / took / 1e9)
