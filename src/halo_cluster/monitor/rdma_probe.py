"""Optional periodic RDMA latency (``--rdma-probe-every``): perftest ``ib_write_lat`` to each
peer's fabric address with this node's planned RDMA device, port and GID index. Every node runs a
perftest server in a loop (one client per run, as perftest works)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from halo_cluster.errors import ParseError
from halo_cluster.perftest import parse_perftest_lat, perftest_argv
from halo_cluster.runner.result import Runner
from halo_cluster.units import wait_seconds

RDMA_PROBE_PORT = 18515
SIZE, ITERATIONS = 2, 1000


@dataclass
class RdmaTarget:
    peer: str
    address: str
    latency_s: float | None = None
    failures: int = 0


@dataclass
class RdmaProber:
    runner: Runner
    device: str
    gid_index: int | None
    targets: list[RdmaTarget]
    every_s: float
    port: int = RDMA_PROBE_PORT  # the TCP port perftest's two sides meet on
    ib_port: int | None = None  # the RDMA port (perftest -i); None: perftest's default, 1
    _stop: threading.Event = field(default_factory=threading.Event)

    def probe_once(self) -> None:
        for target in self.targets:
            argv = perftest_argv(
                "ib_write_lat",
                self.device,
                self.gid_index,
                target.address,
                ib_port=self.ib_port,
                size=SIZE,
                iterations=ITERATIONS,
                port=self.port,
            )
            result = self.runner.run(argv, timeout=30)
            try:
                if not result.ok:
                    raise ParseError(result.error_text(), result.stdout[-200:])
                target.latency_s = parse_perftest_lat(result.stdout).typical_us * 1e-6
            except ParseError:
                target.failures += 1

    def serve_once(self) -> None:
        argv = perftest_argv(
            "ib_write_lat",
            self.device,
            self.gid_index,
            None,
            ib_port=self.ib_port,
            size=SIZE,
            iterations=ITERATIONS,
            port=self.port,
        )
        self.runner.run(argv, timeout=wait_seconds(max(60.0, self.every_s * 2)))

    def start(self) -> None:
        threading.Thread(target=self._clients, name="halo-rdma-probe", daemon=True).start()
        threading.Thread(target=self._server, name="halo-rdma-server", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _clients(self) -> None:
        while not self._stop.wait(wait_seconds(self.every_s)):
            self.probe_once()

    def _server(self) -> None:
        while not self._stop.is_set():
            self.serve_once()
