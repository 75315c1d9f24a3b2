"""``halo bench collective`` and ``halo bench tp``: all-reduce through the library tensor
parallelism really uses, on one Ray actor per GPU (per node without GPUs), each rank
initialised with its own node's plan (the raylet's environment, which ``halo up`` set).

The pure part (sizes, bus bandwidth, the α/β fit, the decode replay's schedule) is here at
the top; ``drive`` runs on the head node (``halo bench-driver``), imports Ray and torch,
and reports JSON lines: ``{"event": "progress", …}``, then one ``result`` or ``error``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from halo_cluster.errors import DriverError as DriverError
from halo_cluster.errors import UsageError
from halo_cluster.stats import quantile
from halo_cluster.units import human_bytes

SCHEMA = "halo.bench.collective/1"
TP_SCHEMA = "halo.bench.tp/1"
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 1000,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 1000**2,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 1000**3,
}
MAX_BYTES = 8 << 30


def parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise UsageError(f"{text!r} is not a size: use bytes with B, KiB, MiB or GiB (e.g. 64KiB)")
    value = int(match.group(1)) * _UNITS[match.group(2).lower()]
    if not 1 <= value <= MAX_BYTES:
        raise UsageError(f"{text!r}: sizes go from 1 B to 8 GiB")
    return value


def parse_sizes(text: str) -> list[int]:
    """``8B:256MiB`` (doubling, like nccl-tests ``-f 2``) or a list ``8KiB,64KiB``."""
    if ":" in text:
        low_text, _, high_text = text.partition(":")
        low, high = parse_size(low_text), parse_size(high_text)
        if low > high:
            raise UsageError(f"--sizes {text!r}: the first size must not exceed the last")
        sizes = []
        size = low
        while size <= high:
            sizes.append(size)
            size *= 2
        return sizes
    sizes = sorted({parse_size(part) for part in text.split(",") if part.strip()})
    if not sizes:
        raise UsageError("--sizes is empty")
    return sizes


def bus_factor(ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth factor: busbw = algbw × 2(n−1)/n."""
    return 2 * (ranks - 1) / ranks if ranks > 1 else 1.0


def sweep_row(size: int, seconds: float, ranks: int) -> dict[str, float]:
    algbw = size / seconds / 1e9  # GB/s, as nccl-tests prints
    return {
        "bytes": size,
        "time_us": _sig(seconds * 1e6),
        "algbw_gbs": _sig(algbw),
        "busbw_gbs": _sig(algbw * bus_factor(ranks)),
    }


def _sig(value: float, digits: int = 6) -> float:
    return float(f"{value:.{digits}g}")


def fit_alpha_beta(rows: Sequence[dict[str, float]], ranks: int) -> dict[str, float] | None:
    """Least squares of t(s) = a + b·s, weighted by 1/t² (relative error, so small messages
    count as much as large ones), mapped onto the planner's ring all-reduce model:
    t = 2(n−1)·α + 2(n−1)/n · s / β. None when the sweep cannot determine both."""
    points = [(float(r["bytes"]), float(r["time_us"]) * 1e-6) for r in rows if r["time_us"] > 0]
    if len({s for s, _t in points}) < 2 or ranks < 2:
        return None
    weights = [1 / (t * t) for _s, t in points]
    sw = sum(weights)
    sx = sum(w * s for w, (s, _t) in zip(weights, points, strict=True))
    sy = sum(w * t for w, (_s, t) in zip(weights, points, strict=True))
    sxx = sum(w * s * s for w, (s, _t) in zip(weights, points, strict=True))
    sxy = sum(w * s * t for w, (s, t) in zip(weights, points, strict=True))
    det = sw * sxx - sx * sx
    if det <= 0:
        return None
    b = (sw * sxy - sx * sy) / det
    a = (sy - b * sx) / sw
    if b <= 0:
        return None
    a = max(a, 0.0)
    steps = 2 * (ranks - 1)
    worst = max(abs(a + b * s - t) / t for s, t in points)
    return {
        "alpha_us": round(a / steps * 1e6, 4),
        "beta_gbps": round(steps / ranks * 8 / (b * 1e9), 4),
        "intercept_us": round(a * 1e6, 3),
        "max_rel_error": round(worst, 4),
    }


def predicted_s(fit: dict[str, float], size: float, ranks: int) -> float:
    steps = 2 * (ranks - 1)
    return steps * fit["alpha_us"] * 1e-6 + steps / ranks * size * 8 / (fit["beta_gbps"] * 1e9)


def tp_schedule(layers: int, hidden: int, batch: int, activation_bytes: int = 2) -> dict[str, int]:
    """A decode step's tensor-parallel communication: 2·L + 2 all-reduces (after attention
    and after the MLP in every layer, plus embedding and logits) of batch × hidden values."""
    return {"allreduces": 2 * layers + 2, "bytes": batch * hidden * activation_bytes}


def transport_verdict(
    backend: str, facts: Sequence[dict[str, Any]], logs: Sequence[str]
) -> dict[str, Any]:
    """The transport the ranks really used: for NCCL/RCCL, decided from the ranks' own debug
    logs (``verify-log``); Gloo is TCP, on the interface each rank's plan named."""
    if backend != "nccl":
        interfaces = [f.get("env", {}).get("GLOO_SOCKET_IFNAME") for f in facts]
        return {
            "backend": "gloo",
            "transport": "socket",
            "interfaces": interfaces,
            "evidence": [
                f"rank {r}: GLOO_SOCKET_IFNAME={i or '(unset: Gloo picks an interface)'}"
                for r, i in enumerate(interfaces)
            ],
        }
    from halo_cluster.nccl_log import parse_logs

    verdict = parse_logs([(f"rank{r}", text.splitlines()) for r, text in enumerate(logs)])
    return {"backend": "nccl", **verdict.to_dict()}


def fallback_error(planned_rdma: bool, transport: dict[str, Any]) -> str | None:
    """The refusal when the plan asked for RDMA and NCCL's logs show sockets (or a mix)."""
    if not planned_rdma or transport.get("backend") != "nccl":
        return None
    if transport.get("transport") not in ("socket", "mixed"):
        return None
    evidence = "; ".join(list(transport.get("evidence", []))[:3])
    return (
        f"the plan asked for RDMA but NCCL used {transport['transport']} ({evidence});"
        " --allow-fallback to accept"
    )


# -- the driver (runs on the head node, with Ray and torch) ----------------------------------
Emit = Callable[[dict[str, Any]], None]


class Worker:
    """One rank. Created as a Ray actor pinned to its node; torch is imported there."""

    def __init__(self) -> None:
        self.rank = -1
        self.backend = "gloo"

    def facts(self) -> dict[str, Any]:
        import importlib.metadata

        import torch

        names = ("NCCL_", "GLOO_", "VLLM_HOST_IP", "RCCL_", "HSA_", "RAY_memory_monitor")
        try:
            ray_version = importlib.metadata.version("ray")
        except importlib.metadata.PackageNotFoundError:
            ray_version = None
        nccl = None
        if torch.cuda.is_available():
            try:
                nccl = ".".join(str(v) for v in torch.cuda.nccl.version())  # type: ignore[no-untyped-call]
            except (RuntimeError, AttributeError):
                nccl = None
        return {
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
            "torch": torch.__version__,
            "hip": getattr(torch.version, "hip", None),
            "nccl": nccl,
            "ray": ray_version,
            "env": {k: v for k, v in os.environ.items() if k.startswith(names)},
        }

    def setup(
        self,
        rank: int,
        world: int,
        master: str,
        port: int,
        backend: str,
        timeout_s: float,
        debug_file: str | None,
    ) -> str:
        import datetime

        import torch
        import torch.distributed as dist

        self.rank, self.backend = rank, backend
        if debug_file:
            os.environ.update(
                {
                    "NCCL_DEBUG": "INFO",
                    "NCCL_DEBUG_SUBSYS": "INIT,NET",
                    "NCCL_DEBUG_FILE": debug_file,
                }
            )
        if backend == "nccl":
            torch.cuda.set_device(0)  # Ray sets CUDA_VISIBLE_DEVICES to this actor's GPU
        dist.init_process_group(
            backend,
            init_method=f"tcp://{master}:{port}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        return f"rank {rank} ready on {socket.gethostname()}"

    def _tensor(self, nbytes: int) -> Any:
        import torch

        dtype = torch.bfloat16 if self.backend == "nccl" else torch.float32
        item = torch.tensor([], dtype=dtype).element_size()
        device = "cuda" if self.backend == "nccl" else "cpu"
        return torch.ones(max(1, nbytes // item), dtype=dtype, device=device)

    def _sync(self) -> None:
        if self.backend == "nccl":
            import torch

            torch.cuda.synchronize()

    def allreduce(self, nbytes: int, iters: int, warmup: int) -> float:
        """Seconds per all-reduce of ``nbytes`` on this rank (a plain timed loop)."""
        import torch.distributed as dist

        tensor = self._tensor(nbytes)
        for _ in range(warmup):
            dist.all_reduce(tensor)
        self._sync()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        self._sync()
        return (time.perf_counter() - start) / iters

    def decode_steps(self, nbytes: int, count: int, steps: int, warmup: int) -> list[float]:
        """Seconds per decode step: ``count`` all-reduces of ``nbytes``, ``steps`` times."""
        import torch.distributed as dist

        tensor = self._tensor(nbytes)
        for _ in range(warmup):
            for _ in range(count):
                dist.all_reduce(tensor)
        self._sync()
        dist.barrier()
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            for _ in range(count):
                dist.all_reduce(tensor)
            self._sync()
            times.append(time.perf_counter() - start)
        return times

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(self, *args)`` in this rank (benchmarks compare against a bare loop)."""
        return fn(self, *args)

    def debug_log(self) -> str:
        path = os.environ.get("NCCL_DEBUG_FILE")
        if not path:
            return ""
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        port: int = probe.getsockname()[1]
        return port


def _unreachable(addresses: dict[str, str]) -> list[str]:
    """Nodes whose fabric address does not answer a ping from here (the head)."""
    lost = []
    for name, address in addresses.items():
        done = subprocess.run(
            ["ping", "-c", "1", "-W", "1", address], capture_output=True, check=False
        )
        if done.returncode != 0:
            lost.append(f"{name} ({address})")
    return lost


class Ranks:
    """The actors of one run, placed one per GPU (one per node without GPUs)."""

    def __init__(self, spec: dict[str, Any], emit: Emit) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.ray = ray
        self.spec = spec
        self.emit = emit
        import halo_cluster

        # The ranks run in the Python of each node's Ray (the engine environment, which
        # need not have halo): Ray ships this package to them.
        package = os.path.dirname(halo_cluster.__file__)
        ray.init(
            address="auto",
            logging_level=logging.ERROR,
            log_to_driver=False,
            runtime_env={"py_modules": [package]},
        )
        alive = {n["NodeManagerAddress"]: n for n in ray.nodes() if n.get("Alive")}  # type: ignore[no-untyped-call]
        self.addresses = {n["name"]: n["address"] for n in spec["nodes"]}
        missing = [f"{name} ({a})" for name, a in self.addresses.items() if a not in alive]
        if missing:
            raise DriverError(f"not in the Ray cluster: {', '.join(missing)} (run 'halo up' first)")
        slots = []  # (node name, Ray node id, one GPU per rank or none)
        for node in spec["nodes"]:
            info = alive[node["address"]]
            gpus = int(info.get("Resources", {}).get("GPU", 0))
            wanted = node.get("gpus")
            count = gpus if wanted is None else min(gpus, wanted)
            slots += [(node["name"], info["NodeID"], count > 0)] * max(1, count)
        tp = spec.get("tp")
        if tp is not None and tp > len(slots):
            raise DriverError(f"--tp {tp}: the cluster has {len(slots)} ranks")
        slots = slots[:tp] if tp else slots
        remote = ray.remote(Worker)
        self.actors: list[Any] = [
            remote.options(
                num_cpus=0,
                num_gpus=1 if gpu else 0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote()
            for _name, node_id, gpu in slots
        ]
        self.nodes = [name for name, _id, _gpu in slots]
        self.world = len(self.actors)
        if self.world < 2:
            raise DriverError("an all-reduce across nodes needs at least two ranks")

    def get(self, refs: Any, what: str, timeout: float) -> Any:
        try:
            return self.ray.get(refs, timeout=timeout)
        except self.ray.exceptions.GetTimeoutError:
            lost = _unreachable(self.addresses)
            where = f": {', '.join(lost)} does not answer on the fabric" if lost else ""
            raise DriverError(f"{what} did not finish within {timeout:g} s{where}") from None
        except self.ray.exceptions.RayActorError as err:
            lost = _unreachable(self.addresses)  # a node gone from the fabric kills its rank
            where = f"; {', '.join(lost)} does not answer on the fabric" if lost else ""
            raise DriverError(f"{what}: a rank died ({str(err).splitlines()[0]}){where}") from None
        except self.ray.exceptions.RayTaskError as err:
            cause = str(err).strip().splitlines()[-1]
            raise DriverError(f"{what} failed: {cause}") from None

    def start(self) -> tuple[list[dict[str, Any]], str]:
        spec = self.spec
        facts = self.get([a.facts.remote() for a in self.actors], "starting the ranks", 120)
        backend = spec["backend"]
        if backend == "auto":
            backend = "nccl" if all(f["gpus"] > 0 for f in facts) else "gloo"
        if backend == "nccl" and not all(f["gpus"] > 0 for f in facts):
            raise DriverError("--backend nccl needs a GPU on every rank; the lab has none (gloo)")
        debug = None
        if backend == "nccl":
            debug = f"/tmp/halo-nccl-{spec['run_id']}.%h.%p.log"
        master = self.addresses[spec["nodes"][0]["name"]]
        port = _free_port()
        self.emit({"event": "progress", "message": f"{self.world} ranks, {backend} init"})
        self.get(
            [
                actor.setup.remote(rank, self.world, master, port, backend, spec["timeout"], debug)
                for rank, actor in enumerate(self.actors)
            ],
            "process group init",
            spec["timeout"] + 30,
        )
        return facts, backend

    def verdict(self, backend: str, facts: list[dict[str, Any]]) -> dict[str, Any]:
        logs: list[str] = []
        if backend == "nccl":
            logs = self.get([a.debug_log.remote() for a in self.actors], "reading NCCL logs", 30)
        return transport_verdict(backend, facts, logs)

    def close(self, graceful: bool) -> None:
        """Tear the process group down; after a failure a rank may hang in a collective,
        so the actors are killed without asking."""
        if graceful:
            with contextlib.suppress(Exception):
                self.ray.get([a.close.remote() for a in self.actors], timeout=10)
        for actor in self.actors:
            self.ray.kill(actor)


def run_sweep(ranks: Ranks, spec: dict[str, Any], emit: Emit) -> list[dict[str, float]]:
    rows = []
    for size in spec["sizes"]:
        times = ranks.get(
            [a.allreduce.remote(size, spec["iters"], spec["warmup"]) for a in ranks.actors],
            f"all-reduce of {human_bytes(size)}",
            spec["timeout"],
        )
        row = sweep_row(size, max(times), ranks.world)
        rows.append(row)
        emit({"event": "row", "row": row})
        emit(
            {
                "event": "progress",
                "message": f"{human_bytes(size):>8}  {row['time_us']:10.1f} µs  "
                f"busbw {row['busbw_gbs']:.3f} GB/s",
            }
        )
    return rows


def run_tp(ranks: Ranks, spec: dict[str, Any], emit: Emit) -> list[dict[str, Any]]:
    rows = []
    model = spec["model"]
    for batch in spec["batches"]:
        schedule = tp_schedule(model["layers"], model["hidden"], batch)
        per_rank = ranks.get(
            [
                a.decode_steps.remote(schedule["bytes"], schedule["allreduces"], spec["steps"], 1)
                for a in ranks.actors
            ],
            f"decode replay at batch {batch}",
            spec["timeout"],
        )
        steps = [max(values) for values in zip(*per_rank, strict=True)]
        ms = (quantile(steps, 0.5) or 0.0) * 1e3
        rows.append(
            {
                "batch": batch,
                "allreduces_per_token": schedule["allreduces"],
                "bytes_per_allreduce": schedule["bytes"],
                "network_ms_per_token": round(ms, 4),
                "network_ms_p90": round((quantile(steps, 0.9) or 0.0) * 1e3, 4),
                "tokens_per_s_ceiling": round(batch * 1e3 / ms, 2) if ms > 0 else None,
                "per_sequence_tokens_per_s_ceiling": round(1e3 / ms, 2) if ms > 0 else None,
            }
        )
        emit({"event": "row", "row": rows[-1]})
        emit(
            {
                "event": "progress",
                "message": f"batch {batch:>4}: {ms:8.3f} ms of network per token",
            }
        )
    return rows


def drive(spec: dict[str, Any], emit: Emit) -> dict[str, Any]:
    """The whole run on the head; returns the result body (no stamp, no file)."""
    ranks = Ranks(spec, emit)
    finished = False
    try:
        facts, backend = ranks.start()
        body: dict[str, Any] = {
            "backend": backend,
            "ranks": [
                {"rank": r, "node": node, **{k: f[k] for k in ("hostname", "gpus", "env")}}
                for r, (node, f) in enumerate(zip(ranks.nodes, facts, strict=True))
            ],
            "versions": {k: facts[0][k] for k in ("torch", "nccl", "ray", "hip")},
            "world_size": ranks.world,
        }
        if spec["kind"] == "collective":
            rows = run_sweep(ranks, spec, emit)
            body.update(
                {"iters": spec["iters"], "sweep": rows, "fit": fit_alpha_beta(rows, ranks.world)}
            )
        else:
            body.update(
                {"model": spec["model"], "steps": spec["steps"], "rows": run_tp(ranks, spec, emit)}
            )
        body["transport"] = ranks.verdict(backend, facts)
        finished = True
        return body
    finally:
        ranks.close(graceful=finished)


def main_driver(spec_text: str, out: Callable[[str], None]) -> int:
    """``halo bench-driver``: spec JSON in, JSON lines out; exit 0 with a result, 1 without."""

    def emit(event: dict[str, Any]) -> None:
        out(json.dumps(event))

    try:
        spec = json.loads(spec_text)
    except ValueError as err:
        emit({"event": "error", "message": f"bad driver spec: {err}"})
        return 1
    try:
        emit({"event": "result", "result": drive(spec, emit)})
        return 0
    except DriverError as err:
        emit({"event": "error", "message": str(err)})
    except ImportError as err:
        emit({"event": "error", "message": f"{err.name or err} is not installed on the head"})
    except ConnectionError as err:
        first = str(err).split(". ")[0]
        emit({"event": "error", "message": f"no Ray cluster on the head ({first}): run 'halo up'"})
    return 1


def read_events(lines: Iterator[str] | Sequence[str]) -> tuple[dict[str, Any] | None, str | None]:
    """(result, error) from a driver's JSON lines; lines that are not events are ignored."""
    result, error = None, None
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        if event.get("event") == "result":
            result = event.get("result")
        elif event.get("event") == "error":
            error = str(event.get("message"))
    return result, error
