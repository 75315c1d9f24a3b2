"""Energy over a window, from a node's power readings (pure: ``facts.power`` reads them).

Of the sources a node has, one tier is used, the first it has of: RAPL's ``psys`` (the whole
platform), amdgpu's energy counter, amdgpu's average power, amdgpu's instant power, RAPL's
packages, amd-smi's socket power; the sources of that tier are added up (two GPUs, two
packages). A counter's energy is the sum of its increases between samples, a decrease being
one wrap at the range the source gives (a decrease with no known range: no number). A gauge's
energy is the trapezoid over its samples (one sample: its watts times the window). Standard
library only, Python 3.9."""

from __future__ import annotations

from dataclasses import dataclass

from halo_cluster.facts.model import COUNTER, PowerReading
from halo_cluster.jsonout import JsonObject

NO_SOURCE = "no power source"  # a node's problem when it has none (node_energy says so)
TIERS = ("RAPL psys", "amdgpu energy", "amdgpu average power", "amdgpu power",
         "RAPL package", "amd-smi power")  # fmt: skip


def tier(reading: PowerReading) -> int | None:
    """Which tier a reading belongs to (an index of ``TIERS``), or None."""
    attr = reading.source.rsplit("/", 1)[-1]
    if reading.tool == "rapl":
        if reading.domain == "psys":
            return 0
        return 4 if reading.domain.startswith("package") else None
    if reading.tool == "amdgpu":
        return {"energy1_input": 1, "power1_average": 2, "power1_input": 3}.get(attr)
    return 5 if reading.tool == "amd-smi" else None


@dataclass(frozen=True)
class Sample:
    at_s: float  # seconds on one clock (monotonic)
    readings: tuple[PowerReading, ...]


@dataclass(frozen=True)
class NodeEnergy:
    """A node's energy over the window, or why there is no number."""

    node: str
    seconds: float
    joules: float | None = None
    method: str | None = None  # "energy counter" or "power samples"
    sources: tuple[str, ...] = ()  # the sources added up
    problem: str | None = None  # why no number (no source, a wrap of unknown range, ...)

    @property
    def watts(self) -> float | None:
        return None if self.joules is None or self.seconds <= 0 else self.joules / self.seconds

    def to_dict(self) -> JsonObject:
        return {"node": self.node, "seconds": round(self.seconds, 3),
                "joules": None if self.joules is None else round(self.joules, 3),
                "watts": None if self.watts is None else round(self.watts, 2),
                "method": self.method, "sources": list(self.sources),
                "problem": self.problem}  # fmt: skip


def counter_increase(before: float, after: float, wrap_j: float | None) -> float | None:
    """Joules a counter gained from ``before`` to ``after``: one wrap where it went down
    and its range is known; None where it went down and the range is not."""
    if after >= before:
        return after - before
    return None if not wrap_j else after + wrap_j - before


def node_energy(node: str, samples: list[Sample]) -> NodeEnergy:
    """The node's energy from its samples over the window (the first to the last)."""
    seconds = samples[-1].at_s - samples[0].at_s if len(samples) > 1 else 0.0
    chosen = _tier(samples)
    if chosen is None:
        return NodeEnergy(node, seconds, problem=NO_SOURCE)
    sources = sorted({r.source for s in samples for r in s.readings if tier(r) == chosen})
    joules = 0.0
    for source in sources:
        series = [(s.at_s, r) for s in samples for r in s.readings if r.source == source]
        used, problem = _energy(series, seconds)
        if used is None:
            return NodeEnergy(node, seconds, sources=tuple(sources), problem=f"{source}: {problem}")
        joules += used
    counter = any(r.kind == COUNTER for s in samples for r in s.readings if tier(r) == chosen)
    method = "energy counter" if counter else "power samples"
    return NodeEnergy(node, seconds, joules, method, tuple(sources))


def _tier(samples: list[Sample]) -> int | None:
    tiers = [t for s in samples for t in (tier(r) for r in s.readings) if t is not None]
    return min(tiers) if tiers else None


def _energy(series: list[tuple[float, PowerReading]], seconds: float) -> tuple[float | None, str]:
    if not series:
        return None, "no reading"
    if series[0][1].kind == COUNTER:
        if len(series) < 2:
            return None, "read once: an energy counter needs a reading at each end"
        total = 0.0
        for (_a, first), (_b, second) in zip(series, series[1:]):
            step = counter_increase(first.value, second.value, second.wrap_j)
            if step is None:
                return None, "the counter went down and its range is unknown"
            total += step
        return total, ""
    if len(series) == 1:
        return series[0][1].value * seconds, ""
    return sum((b - a) * (x.value + y.value) / 2
               for (a, x), (b, y) in zip(series, series[1:])), ""  # fmt: skip


@dataclass(frozen=True)
class ClusterEnergy:
    """Every node's energy over one timed window, and per output token."""

    nodes: tuple[NodeEnergy, ...]
    tokens: int  # output tokens generated in the window

    @property
    def measured(self) -> list[NodeEnergy]:
        return [n for n in self.nodes if n.joules is not None]

    @property
    def coverage(self) -> str:
        return f"{len(self.measured)} of {len(self.nodes)} nodes measured"

    @property
    def joules(self) -> float | None:
        return sum(n.joules or 0.0 for n in self.measured) if self.measured else None

    @property
    def joules_per_token(self) -> float | None:
        total = self.joules
        return None if total is None or self.tokens <= 0 else total / self.tokens

    def line(self) -> str:
        """One line for people; no number where no node has a source."""
        if not self.measured:
            others = [f"{n.node}: {n.problem}" for n in self.nodes if n.problem != NO_SOURCE]
            if not others:
                return "energy: no node has a power source (nothing measured)"
            return "energy: not measured (" + "; ".join(others) + ")"
        per = self.joules_per_token
        per_text = "" if per is None else f", {per:.3f} J per output token"
        return f"energy: {self.joules:.1f} J over the window{per_text} ({self.coverage})"

    def to_dict(self) -> JsonObject:
        per = self.joules_per_token
        return {
            "coverage": self.coverage,
            "tokens": self.tokens,
            "joules": None if self.joules is None else round(self.joules, 3),
            "joules_per_token": None if per is None else round(per, 6),
            "nodes": [n.to_dict() for n in self.nodes],
        }
