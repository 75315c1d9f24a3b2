"""The one quantile of halo: nearest rank, always a measured value."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.stats import quantile
from halo_cluster.units import human_bytes


def test_nearest_rank_examples() -> None:
    assert quantile([], 0.5) is None
    assert quantile([3.0], 0.99) == 3.0
    # an even count: p50 is the lower middle value, whatever the count
    assert quantile([1.0, 2.0], 0.5) == 1.0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.0  # order does not matter
    assert quantile([float(v) for v in range(1, 11)], 0.9) == 9.0
    assert quantile([float(v) for v in range(101)], 0.99) == 99.0
    assert quantile([float(v) for v in range(1, 101)], 0.29) == 29.0  # 0.29 × 100 in floats
    assert quantile([1.0, 2.0], 0.0) == 1.0 and quantile([1.0, 2.0], 1.0) == 2.0


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1), st.floats(0, 1))
def test_quantile_is_a_member_with_the_nearest_rank(values: list[float], q: float) -> None:
    got = quantile(values, q)
    assert got in values
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(q * len(ordered) - 1e-9)))
    assert got == ordered[rank - 1]


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1))
def test_quantiles_are_ordered(values: list[float]) -> None:
    p50, p90, p99 = (quantile(values, q) for q in (0.5, 0.9, 0.99))
    assert p50 is not None and p90 is not None and p99 is not None
    assert p50 <= p90 <= p99


def test_human_bytes() -> None:
    assert human_bytes(8) == "8B"
    assert human_bytes(65536) == "64KiB"
    assert human_bytes(3 << 19) == "1.5MiB"
    assert human_bytes(2 << 30) == "2GiB"
