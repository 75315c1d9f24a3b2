"""Small shared statistics: the one quantile of halo.

Every percentile halo reports (probe round trips, the exporter's ``quantile`` labels,
serve load latencies, the TP replay's p50 and p90) is the **nearest-rank** quantile:
sort the n values and take the ⌈q·n⌉-th smallest (1-based), clamped to the first and
last. It always returns one of the measured values, never an average of two, so a p50
of an even count is the lower of the two middle values (1, 2 → 1; 1, 2, 3, 4 → 2), and
p100 is the maximum. The same definition everywhere keeps p50 ≤ p90 ≤ p99 of one sample
comparable across commands.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

# q·n computed in floating point can land a hair above an integer (0.29 × 100 is
# 28.999999999999996, 0.7 × 10 is 7.000000000000001): forgive that much before the ceiling.
_EPSILON = 1e-9


def quantile(values: Iterable[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile (0 ≤ q ≤ 1) of ``values``; None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = math.ceil(q * len(ordered) - _EPSILON)
    return ordered[min(len(ordered), max(1, rank)) - 1]
