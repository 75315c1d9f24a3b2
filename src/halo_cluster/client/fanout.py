"""The same work on many items at once (nodes, exporters): a bounded thread pool.

Results come back in the order of the items, each as an ``Outcome`` that keeps the item's
own exception: one node that fails does not hide what the others answered. ``each`` is the
same for callers that stop on the first failure, once every item has finished.

At most ``limit`` items run at once (16 by default: a large cluster does not open one SSH
connection per node at the same instant). Ctrl-C (KeyboardInterrupt) in the caller stops
the caller at once: items not started are dropped, the running ones are not waited for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

T = TypeVar("T")
R = TypeVar("R")
LIMIT = 16
# The caller waits in steps: a signal that lands just before a wait without a timeout is only
# seen when that wait ends (the item's own end); in steps, Ctrl-C is seen within one.
POLL_S = 0.2


@dataclass(frozen=True)
class Outcome(Generic[T, R]):
    item: T
    value: R | None = None  # what work(item) returned (None when it raised)
    error: Exception | None = None  # what work(item) raised

    @property
    def ok(self) -> bool:
        return self.error is None


def fan_out(
    items: Iterable[T], work: Callable[[T], R], limit: int = LIMIT, settle: bool = False
) -> list[Outcome[T, R]]:
    """``work(item)`` for every item, at most ``limit`` at once; the outcomes in item order.
    ``settle``: on Ctrl-C, let the items already running finish before it goes on (work that
    starts something, so that what cleans up afterwards sees everything that was started)."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    chosen = list(items)
    if len(chosen) <= 1:
        return [_attempt(work, item) for item in chosen]
    pool = ThreadPoolExecutor(min(limit, len(chosen)), thread_name_prefix="halo-fan-out")
    try:
        futures = [pool.submit(_attempt, work, item) for item in chosen]
        outcomes = [_wait(future) for future in futures]
    except BaseException:  # Ctrl-C while waiting: stop now, not when every item is done
        pool.shutdown(wait=settle, cancel_futures=True)
        raise
    pool.shutdown()
    return outcomes


def each(
    items: Iterable[T], work: Callable[[T], R], limit: int = LIMIT, settle: bool = False
) -> list[R]:
    """``work(item)`` for every item, at most ``limit`` at once; the values in item order.
    When any item raised, the first item's error is raised once all have finished."""
    outcomes = fan_out(items, work, limit, settle)
    for outcome in outcomes:
        if outcome.error is not None:
            raise outcome.error
    return [cast(R, outcome.value) for outcome in outcomes]


def _wait(future: Future[Outcome[T, R]]) -> Outcome[T, R]:
    while True:
        try:
            return future.result(timeout=POLL_S)
        except TimeoutError:
            continue


def _attempt(work: Callable[[T], R], item: T) -> Outcome[T, R]:
    try:
        return Outcome(item, work(item))
    except Exception as err:  # kept with its item; KeyboardInterrupt and exit still stop
        return Outcome(item, error=err)
