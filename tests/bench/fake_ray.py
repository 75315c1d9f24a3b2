"""A stand-in for Ray in the driver's tests: each actor a process of its own holding one real
``Worker`` (so torch.distributed runs for real, one process per rank, as under Ray), calls as
futures, and Ray's wait/get/kill and exception types over them."""

from __future__ import annotations

import multiprocessing
from concurrent import futures
from types import SimpleNamespace
from typing import Any

from halo_cluster.bench.rank import Worker


class RayError(Exception):
    pass


class RayTaskError(RayError):
    pass


class RayActorError(RayError):
    pass


class GetTimeoutError(RayError):
    pass


exceptions = SimpleNamespace(
    RayError=RayError,
    RayTaskError=RayTaskError,
    RayActorError=RayActorError,
    GetTimeoutError=GetTimeoutError,
)

_worker: Worker | None = None


def _call(name: str, args: tuple[Any, ...]) -> Any:
    """In the actor's process: the method of its one Worker."""
    global _worker
    if _worker is None:
        _worker = Worker()
    return getattr(_worker, name)(*args)


class Actor:
    """One rank's process. ``join_port``: the port its ``join`` dials instead of the one it
    is given (a store it cannot reach, as from a node cut off the first one)."""

    def __init__(self, join_port: int | None = None) -> None:
        context = multiprocessing.get_context("spawn")
        self.pool = futures.ProcessPoolExecutor(1, mp_context=context)
        self.join_port = join_port

    def __getattr__(self, name: str) -> SimpleNamespace:
        def remote(*args: Any) -> futures.Future[Any]:
            if name == "join" and self.join_port is not None:
                args = (*args[:3], self.join_port, *args[4:])
            return self.pool.submit(_call, name, args)

        return SimpleNamespace(remote=remote)


def wait(
    refs: list[futures.Future[Any]], num_returns: int = 1, timeout: float | None = None
) -> tuple[list[futures.Future[Any]], list[futures.Future[Any]]]:
    done, _ = futures.wait(refs, timeout=timeout, return_when=futures.FIRST_COMPLETED)
    ready = [ref for ref in refs if ref in done][:num_returns]
    return ready, [ref for ref in refs if ref not in ready]


def get(refs: Any, timeout: float | None = None) -> Any:
    many = isinstance(refs, list)
    values = []
    for ref in refs if many else [refs]:
        try:
            values.append(ref.result(timeout=timeout))
        except BaseException as err:
            if not ref.done():
                raise GetTimeoutError() from None
            # as Ray shows a task's error: where it ran, then the exception's own line
            shown = f"ray::Worker (pid=1)\n  File ...\n{type(err).__name__}: {err}"
            raise RayTaskError(shown) from None
    return values if many else values[0]


def kill(actor: Actor) -> None:
    """Without asking (a rank may hang in a collective), as Ray's kill."""
    processes = list((getattr(actor.pool, "_processes", None) or {}).values())
    actor.pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.kill()
        process.join(10)
