"""``halo lab profile``: this machine measured as the lab's hardware, for ``halo plan
--hardware lab`` (the arithmetic is capacity/profile.py's).

Everything runs on this machine the way lab nodes run: one engine thread per node, the
head on core 0 and the next node on core 1 (``taskset``), over loopback:

- the memory bandwidth one thread reads at (memchr over 256 MiB, best of 7);
- the loopback link: one-way latency of a small TCP message (median of 2000 round trips)
  and the bandwidth of one TCP stream;
- llama.cpp: ``llama-bench`` decode (tg) of the lab's tiny model on one node, then again
  with the model's layers split with one ``ggml-rpc-server`` over loopback.

A multi-node run is never part of the profile: those are what it predicts.
"""

from __future__ import annotations

import datetime
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from halo_cluster.capacity.profile import (
    PROFILE_ID,
    SCHEMA,
    EngineRun,
    engine_figures,
    parse_llama_bench,
)
from halo_cluster.errors import HaloError
from halo_cluster.runner.local import LocalRunner

TG_TOKENS = 128  # llama-bench -n: tokens decoded per repetition
REPETITIONS = 5
HEAD_CORE, WORKER_CORE = 0, 1

_BANDWIDTH = """
import os, time
os.sched_setaffinity(0, {{{core}}})
buf = bytearray(256 * 2**20)
best = float("inf")
for _ in range(7):
    start = time.perf_counter()
    buf.find(1)  # memchr: reads every byte once
    best = min(best, time.perf_counter() - start)
print(len(buf) / best / 1e9)
"""

_LOOPBACK = """
import os, socket, statistics, sys, time
listener = socket.create_server(("127.0.0.1", 0))
port = listener.getsockname()[1]
if os.fork() == 0:
    os.sched_setaffinity(0, {{{worker}}})
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range({rounds}):
        conn.sendall(conn.recv(64))
    left = {stream}
    while left:
        left -= len(conn.recv(min(left, 1 << 20)))
    conn.sendall(b"k")
    os._exit(0)
os.sched_setaffinity(0, {{{head}}})
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
trips = []
for _ in range({rounds}):
    start = time.perf_counter()
    s.sendall(b"x" * 64)
    got = 0
    while got < 64:
        got += len(s.recv(64 - got))
    trips.append(time.perf_counter() - start)
block = b"\\0" * (1 << 20)
start = time.perf_counter()
for _ in range({stream} >> 20):
    s.sendall(block)
s.recv(1)
took = time.perf_counter() - start
os.wait()
print(statistics.median(trips[{rounds} // 10:]) / 2 * 1e6, {stream} * 8 / took / 1e9)
"""


class Profiler:
    def __init__(
        self,
        llama_cpp: str | None,
        runner: LocalRunner | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.llama_cpp = llama_cpp
        self.runner = runner or LocalRunner()
        self.progress = progress or (lambda _msg: None)

    def _python(self, code: str, what: str) -> list[float]:
        import sys

        done = self.runner.run([sys.executable, "-c", code], timeout=300)
        try:
            if not done.ok:
                raise ValueError(done.error_text())
            return [float(v) for v in done.stdout.split()]
        except ValueError as err:
            raise HaloError(f"measuring {what} failed: {err}") from None

    def measure(self) -> dict[str, Any]:
        cores = os.cpu_count() or 1
        if cores < 2:
            raise HaloError("the lab profile needs two cores (a head and a worker)")
        self.progress("memory bandwidth (one thread)")
        bandwidth = self._python(_BANDWIDTH.format(core=HEAD_CORE), "the memory bandwidth")[0]
        self.progress("loopback link (latency, one TCP stream)")
        alpha_us, beta_gbps = self._python(
            _LOOPBACK.format(head=HEAD_CORE, worker=WORKER_CORE, rounds=2000, stream=256 << 20),
            "the loopback link",
        )
        document: dict[str, Any] = {
            "schema": SCHEMA,
            "id": PROFILE_ID,
            "name": f"this machine as lab nodes ({cores} cores shared, one engine thread a node)",
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": cores, "cpu": _cpu_model()},
            "memory_gib": round(_memory_gib(), 2),
            "memory_bw_gbs": round(bandwidth, 3),
            "shared_cores": cores,
            "cpu_only": True,
            "link": {"alpha_us": round(alpha_us, 2), "beta_gbps": round(beta_gbps, 3)},
            "engines": {},
            "measurements": {},
        }
        if self.llama_cpp:
            run, raw = self._llama_cpp(bandwidth, alpha_us, beta_gbps)
            document["engines"]["llama.cpp"] = engine_figures(run, bandwidth)
            document["measurements"]["llama.cpp"] = raw
        return document

    def _llama_cpp(
        self, bandwidth: float, alpha_us: float, beta_gbps: float
    ) -> tuple[EngineRun, dict[str, Any]]:
        from halo_cluster.capacity.engines import find_engine
        from halo_cluster.capacity.estimate import Request, one_node_parts
        from halo_cluster.capacity.gguf_file import read_gguf
        from halo_cluster.capacity.profile import hardware_from_profile
        from halo_cluster.capacity.spec import Link
        from halo_cluster.engines.llama_cpp_argv import offload_layers
        from halo_cluster.lab.tiny_model import write_model
        from halo_cluster.lab.tiny_spec import TinyModelSpec

        assert self.llama_cpp is not None
        bench = str(Path(self.llama_cpp) / "bin" / "llama-bench")
        server = str(Path(self.llama_cpp) / "bin" / "ggml-rpc-server")
        for program in (bench, server):
            if not os.access(program, os.X_OK):
                raise HaloError(f"{program}: not found; build llama.cpp with 'make llama-cpp'")
        spec = TinyModelSpec()
        with tempfile.TemporaryDirectory(prefix="halo-profile-") as tmp:
            self.progress("llama.cpp: writing the tiny model")
            model = str(Path(tmp) / "model.gguf")
            write_model(Path(tmp), spec, force=True, formats=("gguf",))
            base = ["-m", model, "-p", "0", "-n", str(TG_TOKENS), "-t", "1"]
            base += ["-r", str(REPETITIONS), "-o", "json"]
            self.progress("llama.cpp: one node (llama-bench tg)")
            alone = self._bench([bench, *base])
            port = _free_port()
            self.progress("llama.cpp: one stage over loopback (ggml-rpc-server)")
            process = self.runner.start(
                [
                    "taskset",
                    "-c",
                    str(WORKER_CORE),
                    server,
                    "-H",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "-t",
                    "1",
                ]
            )
            try:
                _wait_port(port, process)
                layers = offload_layers(spec.layers, 1)
                staged = self._bench(
                    [bench, *base, "--rpc", f"127.0.0.1:{port}", "-ngl", str(layers)]
                )
            finally:
                process.kill()
                process.wait()
            found = read_gguf(Path(model))
        hardware = hardware_from_profile(_skeleton(bandwidth), "the profile being measured")
        loopback = Link("loopback", "loopback", alpha_us, beta_gbps, "measured")
        req = Request(
            found.spec,
            hardware,
            loopback,
            nodes=1,
            context=TG_TOKENS,
            engine=find_engine("llama.cpp"),
            weights=found.weights,
        )
        read_bytes, wire_s = one_node_parts(req)
        run = EngineRun(
            "llama.cpp",
            1 / alone,
            1 / staged,
            read_bytes,
            spec.layers,
            wire_s,
            f"halo lab profile: llama-bench tg{TG_TOKENS} of the lab's tiny model (layers "
            f"{spec.layers}, hidden {spec.hidden}, F16), one thread, alone {alone:.1f} tok/s "
            f"and with one ggml-rpc-server over loopback {staged:.1f} tok/s",
        )
        raw = {
            "model": {"layers": spec.layers, "hidden": spec.hidden, "vocab": spec.vocab},
            "tg_tokens": TG_TOKENS,
            "alone_tokens_per_s": round(alone, 2),
            "one_stage_tokens_per_s": round(staged, 2),
            "read_bytes": round(read_bytes),
            "stage_wire_us": round(wire_s * 1e6, 2),
        }
        return run, raw

    def _bench(self, argv: list[str]) -> float:
        done = self.runner.run(["taskset", "-c", str(HEAD_CORE), *argv], timeout=600)
        if not done.ok:
            raise HaloError(f"llama-bench failed: {done.error_text()}")
        return parse_llama_bench(done.stdout)


def _skeleton(bandwidth: float) -> dict[str, Any]:
    """A profile with only what a one-node request reads: the bandwidth, no engine figures."""
    return {
        "schema": SCHEMA,
        "memory_gib": _memory_gib() or 1.0,
        "memory_bw_gbs": bandwidth,
        "shared_cores": os.cpu_count() or 1,
        "engines": {},
    }


def write_profile(document: dict[str, Any], directory: Path) -> Path:
    import json

    from halo_cluster.atomic import atomic_write

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{PROFILE_ID}.json"
    atomic_write(path, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    return path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_port(port: int, process: Any, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise HaloError(f"ggml-rpc-server exited ({process.returncode}) before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise HaloError(f"ggml-rpc-server did not listen on 127.0.0.1:{port} within {seconds:g} s")


def _memory_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"
