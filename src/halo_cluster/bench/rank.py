"""One rank of ``halo bench collective``/``tp``: a Ray actor pinned to its node, which joins
the run's rendezvous (rank 0 serves it), initialises torch.distributed over it with its
node's plan (the raylet's environment) and times all-reduces. torch is imported inside the
actor only."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

from halo_cluster.jsonout import JsonObject


class Worker:
    """One rank. Created as a Ray actor pinned to its node; torch is imported there."""

    def __init__(self) -> None:
        self.rank = -1
        self.world = 0
        self.backend = "gloo"
        self.store: Any = None  # the rendezvous (rank 0 serves it): kept while the group lives

    def facts(self) -> JsonObject:
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

    def join(self, rank: int, world: int, master: str, port: int, timeout_s: float) -> str:
        """Join the run's rendezvous: rank 0 starts the store (on ``master:port``), the others
        connect to it within ``timeout_s``. A rank whose node cannot reach the first one fails
        here, on its own, so the driver can name it."""
        import datetime

        import torch.distributed as dist

        self.rank, self.world = rank, world
        self.store = dist.TCPStore(  # type: ignore[attr-defined]
            master,
            port,
            world,
            rank == 0,
            datetime.timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
        return socket.gethostname()

    def setup(self, backend: str, timeout_s: float, debug_file: str | None) -> str:
        """torch.distributed's process group over the joined store."""
        import datetime

        import torch
        import torch.distributed as dist

        self.backend = backend
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
            store=self.store,
            rank=self.rank,
            world_size=self.world,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        return f"rank {self.rank} ready on {socket.gethostname()}"

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
        self.store = None
