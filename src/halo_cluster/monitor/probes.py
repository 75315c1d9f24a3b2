"""TCP echo probes: every exporter answers echoes on a port and measures the round trip to
its peers on each path. Round trips are kept in a bounded window for quantiles."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from halo_cluster.stats import quantile
from halo_cluster.units import wait_seconds

PROBE_BYTES = 64
WINDOW = 600


ECHO_IDLE_S = 60.0  # a prober sends every interval: a minute of silence is a dead peer
MAX_ECHO_CLIENTS = 64


class _EchoHandler(socketserver.BaseRequestHandler):
    server: EchoServer

    def handle(self) -> None:
        conn = self.request
        if not self.server.clients.acquire(blocking=False):
            return  # more peers than a cluster has: not one of ours
        try:
            conn.settimeout(ECHO_IDLE_S)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                data = conn.recv(4096)
                if not data:
                    return
                conn.sendall(data)
        except OSError:
            return  # reset, timeout: the peer went away
        finally:
            self.server.clients.release()


class EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: str, port: int) -> None:
        self.clients = threading.BoundedSemaphore(MAX_ECHO_CLIENTS)
        super().__init__((address, port), _EchoHandler)

    def handle_error(self, request: object, client_address: object) -> None:
        return  # a client's misbehaviour is not worth a traceback in the log

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="halo-echo", daemon=True)
        thread.start()
        return thread


@dataclass
class Target:
    peer: str
    path: str  # fabric / mgmt
    address: str
    port: int
    rtts_s: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    count: int = 0
    total_s: float = 0.0
    failures: int = 0
    sock: socket.socket | None = None

    def probe(self, timeout_s: float = 1.0) -> float | None:
        """One round trip over a kept-open connection; None (and reconnect next time) on failure."""
        try:
            if self.sock is None:
                self.sock = socket.create_connection((self.address, self.port), timeout=timeout_s)
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            payload = b"h" * PROBE_BYTES
            start = time.perf_counter()
            self.sock.sendall(payload)
            received = 0
            while received < PROBE_BYTES:
                chunk = self.sock.recv(PROBE_BYTES - received)
                if not chunk:
                    raise OSError("connection closed")
                received += len(chunk)
            rtt = time.perf_counter() - start
        except OSError:
            self.failures += 1
            self.close()
            return None
        self.rtts_s.append(rtt)
        self.count += 1
        self.total_s += rtt
        return rtt

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def quantile(self, q: float) -> float | None:
        return quantile(list(self.rtts_s), q)


class Prober:
    """Probes every target each interval from one background thread."""

    def __init__(self, targets: list[Target], interval_s: float) -> None:
        self.targets = targets
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="halo-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for target in self.targets:
            target.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for target in self.targets:
                target.probe(timeout_s=min(1.0, self.interval_s))
            self._stop.wait(wait_seconds(self.interval_s))
