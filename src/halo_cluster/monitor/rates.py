"""Rates: a pure function of two snapshots. Counters only go up; a drop means the counter
was reset (driver reload, device re-added), and the new value counts from zero — a rate is
never negative."""

from __future__ import annotations

from collections.abc import Iterable

from halo_cluster.monitor.snapshot import Key, Snapshot


def is_counter(key: Key) -> bool:
    return key[0].endswith("_total")


def rates(
    previous: Snapshot, current: Snapshot, keys: Iterable[Key] | None = None
) -> dict[Key, float]:
    """Per-second increase of every counter present in both snapshots (or only of ``keys``)."""
    elapsed = current.time_s - previous.time_s
    if elapsed <= 0:
        return {}
    out: dict[Key, float] = {}
    wanted = current.values.keys() if keys is None else keys
    for key in wanted:
        value = current.values.get(key)
        if value is None or not is_counter(key) or key not in previous.values:
            continue
        before = previous.values[key]
        increase = value - before if value >= before else value
        out[key] = increase / elapsed
    return out
