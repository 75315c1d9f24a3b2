"""Work on many nodes at once, at most ``limit`` at a time, results in input order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
LIMIT = 16


@dataclass(frozen=True)
class Outcome(Generic[T, R]):
    item: T
    value: R | None
    error: BaseException | None


def fan_out(items: Sequence[T], work: Callable[[T], R], limit: int = LIMIT) -> list[Outcome[T, R]]:
    def one(item: T) -> Outcome[T, R]:
        try:
            return Outcome(item, work(item), None)
        except Exception as err:  # kept per item
            return Outcome(item, None, err)

    with ThreadPoolExecutor(max_workers=max(1, min(limit, len(items)))) as pool:
        return list(pool.map(one, items))


def each(items: Sequence[T], work: Callable[[T], R], limit: int = LIMIT) -> list[R]:
    outcomes = fan_out(items, work, limit)
    for outcome in outcomes:
        if outcome.error is not None:
            raise outcome.error
    return [o.value for o in outcomes]  # type: ignore[misc]
