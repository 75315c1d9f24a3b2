"""``halo lab profile``: this machine measured as the lab's hardware, for ``halo plan
--hardware lab`` (the arithmetic is capacity/profile.py's).

Everything runs on this machine the way lab nodes run: one engine thread per node, the
head on core 0 and the next node on core 1 (``taskset``), over loopback:

- the memory bandwidth one thread reads at (memchr over 256 MiB, best of 7);
- the loopback link: one-way latency of a small TCP message (median of 2000 round trips)
  and the bandwidth of one TCP stream;
- llama.cpp: ``llama-bench`` decode (tg) of the model on one node, then again with the
  model's layers split with one ``ggml-rpc-server`` over loopback;
- vLLM (when the engine environment is there): ``vllm serve`` of the same model on one node
  (TP=1, one thread) and TP=2 with two node ranks on this machine (Gloo over loopback, as
  between hosts), both through vLLM's own multi-node executor as ``halo serve --executor
  mp`` runs them, both up at once and their streamed requests taking turns: the time per
  output token, and what a collective costs beyond its compute and its wire; and bare Gloo
  all-reduces of a token's hidden state among 2, 4 and 8 processes, rank r on core r % 2 as
  lab nodes are: what ranks that outnumber the cores wait for one another on every hop.

Nothing in the profile runs on two lab nodes: those runs are what it predicts.
"""

from __future__ import annotations

import datetime
import os
import statistics
import tempfile
from collections.abc import Callable
from functools import partial
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
from halo_cluster.jsonout import JsonObject
from halo_cluster.lab.served import (
    free_port,
    healthy,
    interleaved_decode,
    listening,
    stop_all,
    wait_all,
)
from halo_cluster.runner.local import LocalRunner

TG_TOKENS = 128  # llama-bench -n: tokens decoded per repetition
REPETITIONS = 3  # llama-bench -r
ROUNDS = 3  # llama-bench runs of each kind, interleaved; their median counts
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
        gguf: str | None = None,
        engine: str | None = None,
        checkpoint: str | None = None,
    ) -> None:
        self.llama_cpp = llama_cpp
        self.gguf = gguf  # the model to run; None: the lab's tiny model
        self.engine = engine  # vLLM's environment; None: vLLM is not measured
        self.checkpoint = checkpoint  # the same model for vLLM (config, safetensors, tokenizer)
        self.runner = runner or LocalRunner()
        self.progress = progress or (lambda _msg: None)

    def _python(self, code: str, what: str, python: str | None = None) -> list[float]:
        """The numbers ``code`` prints, run by ``python`` (default: halo's own)."""
        import sys

        done = self.runner.run([python or sys.executable, "-c", code], timeout=300)
        try:
            if not done.ok:
                raise ValueError(done.error_text())
            values = [float(v) for v in done.stdout.split()]
            if not values:
                raise ValueError("it printed no number")
            return values
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
        with tempfile.TemporaryDirectory(prefix="halo-profile-") as tmp:
            gguf, checkpoint = self._models(Path(tmp))
            if self.llama_cpp:
                run, raw = self._llama_cpp(gguf, bandwidth, alpha_us, beta_gbps)
                document["engines"]["llama.cpp"] = engine_figures(run, bandwidth)
                document["measurements"]["llama.cpp"] = raw
            if self.engine:
                run, raw = self._vllm(checkpoint, bandwidth, alpha_us, beta_gbps)
                document["engines"]["vllm"] = engine_figures(run, bandwidth)
                figures = document["engines"]["vllm"]
                figures["per_collective_us"] = raw["per_collective_us"]
                figures["shared_core_allreduce_us"] = raw["shared_core_allreduce_us"]
                document["measurements"]["vllm"] = raw
        return document

    def _models(self, tmp: Path) -> tuple[str, str]:
        """The model in both formats: the ones given, else the lab's tiny model written."""
        from halo_cluster.lab.tiny_model import write_model
        from halo_cluster.lab.tiny_spec import TinyModelSpec

        gguf, checkpoint = self.gguf, self.checkpoint
        if gguf is None or (self.engine and checkpoint is None):
            self.progress("writing the lab's tiny model")
            write_model(tmp, TinyModelSpec(), force=True, formats=("safetensors", "gguf"))
        return gguf or str(tmp / "model.gguf"), checkpoint or str(tmp)

    def _llama_cpp(
        self, model: str, bandwidth: float, alpha_us: float, beta_gbps: float
    ) -> tuple[EngineRun, dict[str, Any]]:
        from halo_cluster.capacity.estimate import one_node_parts
        from halo_cluster.capacity.gguf_file import read_gguf
        from halo_cluster.engines.llama_cpp_argv import offload_layers

        assert self.llama_cpp is not None
        bench = str(Path(self.llama_cpp) / "bin" / "llama-bench")
        server = str(Path(self.llama_cpp) / "bin" / "ggml-rpc-server")
        for program in (bench, server):
            if not os.access(program, os.X_OK):
                raise HaloError(f"{program}: not found; build llama.cpp with 'make llama-cpp'")
        found = read_gguf(Path(model))
        spec = found.spec
        base = ["-m", model, "-p", "0", "-n", str(TG_TOKENS), "-t", "1"]
        base += ["-r", str(REPETITIONS), "-o", "json"]
        layers = str(offload_layers(spec.layers, 1))
        servers = {}  # one rpc-server on the other core, one on the head's own
        try:
            for core in (WORKER_CORE, HEAD_CORE):
                port = free_port()
                servers[core] = (port, self.runner.start(
                    ["taskset", "-c", str(core), server, "-H", "127.0.0.1", "-p", str(port),
                     "-t", "1"]
                ))  # fmt: skip
            for port, process in servers.values():
                wait_all([process], partial(listening, port), "ggml-rpc-server", 60.0)
            runs: dict[str, list[float]] = {"alone": [], "other": [], "same": []}
            for index in range(ROUNDS):  # interleaved: a slow minute touches all three
                self.progress(f"llama.cpp: round {index + 1} of {ROUNDS} (llama-bench tg)")
                runs["alone"].append(self._bench([bench, *base]))
                for name, core in (("other", WORKER_CORE), ("same", HEAD_CORE)):
                    rpc = f"127.0.0.1:{servers[core][0]}"
                    runs[name].append(self._bench([bench, *base, "--rpc", rpc, "-ngl", layers]))
        finally:
            for _, process in servers.values():
                process.kill()
                process.wait()
        alone, staged, shared = (statistics.median(runs[k]) for k in ("alone", "other", "same"))
        read_bytes, wire_s = one_node_parts(
            _request(found.spec, found.weights, "llama.cpp", bandwidth, alpha_us, beta_gbps)
        )
        run = EngineRun(
            "llama.cpp",
            1 / alone,
            1 / staged,
            read_bytes,
            spec.layers,
            wire_s,
            f"halo lab profile: llama-bench tg{TG_TOKENS} of {found.spec.name} (layers "
            f"{spec.layers}, hidden {spec.hidden}), one thread, median of {ROUNDS}: alone "
            f"{alone:.1f} tok/s, with one ggml-rpc-server over loopback on the other core "
            f"{staged:.1f} tok/s, on the head's own core {shared:.1f} tok/s",
            1 / shared,
        )
        raw = {
            "model": {
                "name": spec.name,
                "layers": spec.layers,
                "hidden": spec.hidden,
                "vocab": spec.vocab,
                "file": os.path.basename(model),
            },
            "tg_tokens": TG_TOKENS,
            "alone_tokens_per_s": round(alone, 2),
            "one_stage_tokens_per_s": round(staged, 2),
            "one_stage_same_core_tokens_per_s": round(shared, 2),
            "rounds": {k: [round(v, 2) for v in found] for k, found in runs.items()},
            "read_bytes": round(read_bytes),
            "stage_wire_us": round(wire_s * 1e6, 2),
        }
        return run, raw

    def _vllm(
        self, checkpoint: str, bandwidth: float, alpha_us: float, beta_gbps: float
    ) -> tuple[EngineRun, dict[str, Any]]:
        from halo_cluster.capacity.estimate import (
            ACTIVATION_BYTES,
            allreduce_s,
            one_node_parts,
            tp2_collective_s,
        )
        from halo_cluster.capacity.hf_config import model_from_hf_config

        assert self.engine is not None
        vllm = str(Path(self.engine) / "bin" / "vllm")
        python = str(Path(self.engine) / "bin" / "python")
        if not os.access(vllm, os.X_OK):
            raise HaloError(f"{vllm}: not found; build the engine with 'make engine'")
        spec = model_from_hf_config(Path(checkpoint) / "config.json")
        self.progress(
            "vLLM: TP=1 on one node and TP=2 through its own multi-node executor, two node "
            "ranks on this machine over loopback (vllm serve; a minute or two to start)"
        )
        measured = self._vllm_decode(vllm, checkpoint, (1, 2))
        token_s, tp2_s = (statistics.median(measured[tp]) for tp in (1, 2))
        bare = {
            ranks: self._bare_allreduce_us(python, spec.hidden, ranks) for ranks in SHARED_RANKS
        }
        request = _request(spec, None, "vllm", bandwidth, alpha_us, beta_gbps)
        read_bytes, _ = one_node_parts(request)
        run = EngineRun(
            "vllm",
            token_s,
            None,
            read_bytes,
            spec.layers,
            0.0,
            f"halo lab profile: vllm serve of {spec.name} (layers {spec.layers}, hidden "
            f"{spec.hidden}), one thread a rank: TP=1 {1 / token_s:.1f} tok/s per stream, "
            f"TP=2 over its multi-node executor and Gloo on loopback {1 / tp2_s:.1f} tok/s",
        )
        per_collective_s = tp2_collective_s(token_s, tp2_s, read_bytes, request)
        payload = spec.hidden * ACTIVATION_BYTES
        raw = {
            "model": {"name": spec.name, "layers": spec.layers, "hidden": spec.hidden},
            "tokens_per_s": round(1 / token_s, 2),
            "tp2_tokens_per_s": round(1 / tp2_s, 2),
            # each request's tokens/s, the two layouts' requests taken in turns
            "requests_tokens_per_s": {
                str(tp): [round(1 / s, 2) for s in found] for tp, found in measured.items()
            },
            "read_bytes": round(read_bytes),
            "bare_allreduce_us": {str(n): round(us, 2) for n, us in bare.items()},
            # what each collective of vLLM's TP=2 cost beyond its compute and its wire
            "per_collective_us": round(per_collective_s * 1e6, 2),
            # a bare all-reduce at n ranks on the shared cores beyond its wire on loopback
            "shared_core_allreduce_us": {
                str(n): round(max(0.0, us - allreduce_s(payload, n, request.link) * 1e6), 2)
                for n, us in bare.items()
            },
        }
        return run, raw

    def _bare_allreduce_us(self, python: str, hidden: int, ranks: int) -> float:
        """The median time of a bare Gloo all-reduce of ``hidden`` bf16 values among
        ``ranks`` processes over loopback, rank r on core r % 2 (median of three runs)."""
        self.progress(f"vLLM: bare Gloo all-reduces among {ranks} processes over loopback")
        runs = [
            self._python(
                _GLOO.format(port=free_port(), hidden=hidden, ranks=ranks, rounds=300),
                f"a Gloo all-reduce among {ranks} processes",
                python,
            )[-1]
            for _ in range(3)
        ]
        return statistics.median(runs)

    def _vllm_decode(
        self, vllm: str, checkpoint: str, layouts: tuple[int, ...]
    ) -> dict[int, list[float]]:
        """Seconds per output token of each request of one stream of ``vllm serve``, for
        each TP size in ``layouts``, run as ``halo serve --executor mp`` runs it on lab nodes
        (vLLM's own executor, one node rank per process, rank r's thread on core r % 2,
        shared memory off so ranks all-reduce over Gloo as on separate hosts). Every layout
        is up at once (an idle server sleeps) and their requests take turns, so the machine's
        drift over minutes weighs on each alike."""
        servers: dict[int, int] = {}
        processes: list[Any] = []
        with tempfile.TemporaryDirectory(prefix="halo-profile-vllm-") as logs:
            try:
                for tp in layouts:
                    servers[tp] = self._vllm_ready(vllm, checkpoint, tp, processes, Path(logs))
                return interleaved_decode(servers, VLLM_REQUESTS, self.progress)
            finally:
                stop_all(processes)

    def _vllm_ready(
        self, vllm: str, checkpoint: str, tp: int, processes: list[Any], logs: Path
    ) -> int:
        """TP=``tp``'s ranks started and healthy (every layout started so far watched: one
        that dies meanwhile is named at once, with what its log raised); its API port. Ports
        are picked free just before vLLM binds them, so another process may take one first:
        a start that fails on a port in use is made again once, on other ports."""
        what = f"vllm serve (TP={tp})"
        for attempt in (1, 2):
            mine = len(processes)
            port = self._vllm_start(vllm, checkpoint, tp, processes, logs / f"tp{tp}-{attempt}")
            try:
                wait_all(processes, partial(healthy, port), what, 900.0)
                return port
            except HaloError as err:
                mine_died = any(p.poll() is not None for p in processes[mine:])
                # an earlier layout may be the one that died: its logs then say why
                said = _log_cause(logs / f"tp{tp}-{attempt}" if mine_died else logs)
                if attempt == 1 and mine_died and said is not None and "in use" in said:
                    self.progress(f"{what}: {said}; starting it again on other ports")
                    stop_all(processes[mine:])
                    del processes[mine:]
                    continue
                raise HaloError(f"{err}: {said}" if said else str(err)) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _vllm_start(
        self, vllm: str, checkpoint: str, tp: int, processes: list[Any], logs: Path
    ) -> int:
        """Start TP=``tp``'s ranks, each added to ``processes`` as it starts (so that what
        started is stopped whatever happens next), each one's stderr in ``logs``; its API
        port."""
        port, master = free_port(), free_port()
        logs.mkdir(parents=True, exist_ok=True)
        for rank in range(tp):
            env = {**VLLM_ENV, "VLLM_CPU_OMP_THREADS_BIND": str(rank % 2)}
            if tp > 1:
                env["HALO_VLLM_NO_SHM"] = "1"
            argv = [vllm, "serve", checkpoint, "--tensor-parallel-size", str(tp),
                    "--distributed-executor-backend", "mp", "--nnodes", str(tp),
                    "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                    "--master-port", str(master), "--enforce-eager",
                    "--max-model-len", "1024", "--max-num-seqs", "8"]  # fmt: skip
            argv += ["--headless"] if rank else ["--host", "127.0.0.1", "--port", str(port)]
            with open(logs / f"rank{rank}.log", "wb") as log:  # the child keeps its own copy
                processes.append(
                    self.runner.start(
                        ["env", *(f"{k}={v}" for k, v in env.items()), *argv],
                        stderr=log,
                        new_session=True,
                    )
                )
        return port

    def _bench(self, argv: list[str]) -> float:
        done = self.runner.run(["taskset", "-c", str(HEAD_CORE), *argv], timeout=600)
        if not done.ok:
            raise HaloError(f"llama-bench failed: {done.error_text()}")
        return parse_llama_bench(done.stdout)


VLLM_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": str(HEAD_CORE),
}

# measured completions per layout (after one warm-up each); even, so that each layout goes
# first as often as second. A layout's figure is 1 / the median of its seconds per token
# (with 8, the mean of the middle two), so it may differ a little from the median of the
# requests' own tokens/s kept beside it
VLLM_REQUESTS = 8

# ranks all-reduce among themselves as vLLM's TP ranks do, each in its own process
SHARED_RANKS = (2, 4, 8)

_GLOO = """
import os, statistics, time
rank = 0
for r in range(1, {ranks}):
    if os.fork() == 0:
        rank = r
        break
os.sched_setaffinity(0, {{rank % 2}})
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", rank=rank,
                        world_size={ranks})
x = torch.ones({hidden}, dtype=torch.bfloat16)
took = []
for _ in range({rounds}):
    start = time.perf_counter()
    dist.all_reduce(x)
    took.append(time.perf_counter() - start)
dist.destroy_process_group()
if rank:
    os._exit(0)
for _ in range({ranks} - 1):
    os.wait()
print(statistics.median(took[{rounds} // 10:]) * 1e6)
"""


def _log_cause(logs: Path) -> str | None:
    """What a layout's ranks raised, as one line (the last 64 KiB of each rank's log read),
    or None."""
    from halo_cluster.witness.engine_log import raised

    for log in sorted(logs.glob("**/rank*.log")):
        with open(log, "rb") as handle:
            handle.seek(max(0, log.stat().st_size - (64 << 10)))
            said = raised(handle.read().decode("utf-8", "replace").splitlines())
        if said is not None:
            where = log.relative_to(logs).with_suffix("")
            return f"{str(where).replace('/', ' ')}: {said}"
    return None


def _request(
    spec: Any, weights: Any, engine: str, bandwidth: float, alpha_us: float, beta_gbps: float
) -> Any:
    """The planner's request for one node of this model on the profile being measured."""
    from halo_cluster.capacity.engines import find_engine
    from halo_cluster.capacity.estimate import Request
    from halo_cluster.capacity.profile import hardware_from_profile
    from halo_cluster.capacity.spec import Link

    hardware = hardware_from_profile(_skeleton(bandwidth), "the profile being measured")
    loopback = Link("loopback", "loopback", alpha_us, beta_gbps, "measured")
    return Request(
        spec, hardware, loopback, nodes=1, context=TG_TOKENS, engine=find_engine(engine),
        weights=weights, quant=spec.dtype,
    )  # fmt: skip


def _skeleton(bandwidth: float) -> JsonObject:
    """A profile with only what a one-node request reads: the bandwidth, no engine figures."""
    return {
        "schema": SCHEMA,
        "memory_gib": _memory_gib() or 1.0,
        "memory_bw_gbs": bandwidth,
        "shared_cores": os.cpu_count() or 1,
        "engines": {},
    }


def write_profile(document: JsonObject, directory: Path) -> Path:
    import json

    from halo_cluster.atomic import atomic_write

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{PROFILE_ID}.json"
    atomic_write(path, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    return path


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
