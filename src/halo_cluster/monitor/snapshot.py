"""What the sampler produces and everything downstream only reads: a series key (metric
name and labels) and an immutable timestamped snapshot of values. Pure types, no I/O: rates,
alerts, the exposition format and the TUI frame import this, not the sampler."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]
Key = tuple[str, Labels]


@dataclass(frozen=True)
class Snapshot:
    time_s: float  # monotonic
    values: Mapping[Key, float]
    errors: int = 0  # files that could not be read in this sample
    vanished: tuple[str, ...] = field(default=())  # devices gone since the previous sample
