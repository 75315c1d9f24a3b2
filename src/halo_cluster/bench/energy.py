"""Energy over a benchmark's timed windows, for every node of the cluster.

Each node's ``power`` command (``wire``: its power sources, read once) is asked once before
the first window (``Meter.probe``): a node without a source, or one that does not answer,
is that node's problem in every window and is not asked again. The others are read at the
start and the end of each window, on the caller's thread, outside the timed part, and about
once a second in between by one sampler thread on the controller (every node in parallel;
its reads are SSH round trips that leave the load generator's threads alone). The window
ends with that thread joined, also on an error or Ctrl-C (then without the end readings):
no thread or process is left behind. Each reading's time is the middle of its round trip.

The joules of each node come from ``facts.energy.node_energy`` (counters summed over their
increases, gauges integrated), the cluster's from ``ClusterEnergy`` with the window's output
tokens. The window measured is the timed one plus the reads at both ends (one round trip
each): the energy per token is, if anything, a little high, never a made-up number.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from halo_cluster.client.fanout import fan_out
from halo_cluster.client.node import NodeClient, escaped
from halo_cluster.errors import NodeCallError
from halo_cluster.facts.energy import (
    NO_SOURCE,
    ClusterEnergy,
    NodeEnergy,
    Sample,
    counter_increase,
    node_energy,
    tier,
)
from halo_cluster.facts.model import COUNTER
from halo_cluster.jsonout import JsonObject
from halo_cluster.wire.answers import Power, parse_power
from halo_cluster.wire.args import power_args

INTERVAL_S = 1.0  # between readings inside a window
READ_TIMEOUT_S = 15.0  # one node's power command (amd-smi, where installed, takes ~1 s)

Reader = Callable[[str], Power]  # a node's name -> its power answer (raises when it fails)


def node_reader(clients: Mapping[str, NodeClient]) -> Reader:
    """Each node's ``power`` command through its client; a failure or a malformed answer
    is one NodeCallError naming the node."""

    def read(name: str) -> Power:
        client = clients[name]
        done = client.call(*power_args(), timeout=READ_TIMEOUT_S)
        if not done.ok:
            raise NodeCallError(f"{name}: power failed: {escaped(done.error_text())}")
        try:
            return parse_power(done.stdout)
        except ValueError as err:  # a WireError: one line already
            raise NodeCallError(f"{name}: {err}") from None

    return read


@dataclass(frozen=True)
class LevelEnergy:
    """One window's energy: the cluster's (``ClusterEnergy``) and each measured node's
    watts over the window (seconds from its start, watts), for a plot."""

    energy: ClusterEnergy
    watts: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)

    @property
    def joules_per_token(self) -> float | None:
        return self.energy.joules_per_token

    def line(self) -> str:
        return self.energy.line()

    def to_dict(self) -> JsonObject:
        series: JsonObject = {n: [[t, w] for t, w in points] for n, points in self.watts.items()}
        return {**self.energy.to_dict(), "watts": series}


def watts_series(samples: Sequence[Sample], start_s: float) -> tuple[tuple[float, float], ...]:
    """The node's watts over a window from the sources ``node_energy`` adds up (the first
    tier it has): a gauge's value at each reading, a counter's increase over each gap at
    the gap's middle. Empty where there is no source or a counter went down unknowably."""
    tiers = [t for s in samples for r in s.readings if (t := tier(r)) is not None]
    if not tiers:
        return ()
    chosen = min(tiers)
    points = []
    for before, after in itertools.pairwise(samples):
        gap = after.at_s - before.at_s
        if gap <= 0:
            continue
        found = {r.source: r for r in before.readings if tier(r) == chosen}
        used = [(found[r.source], r) for r in after.readings if r.source in found]
        if not used:
            continue
        if used[0][1].kind == COUNTER:
            steps = [counter_increase(a.value, b.value, b.wrap_j) for a, b in used]
            if any(step is None for step in steps):
                return ()
            points.append(((before.at_s + after.at_s) / 2, sum(s or 0.0 for s in steps) / gap))
        else:
            if not points:
                points.append((before.at_s, sum(a.value for a, _b in used)))
            points.append((after.at_s, sum(b.value for _a, b in used)))
    return tuple((round(at - start_s, 3), round(watts, 2)) for at, watts in points)


class Meter:
    """Which of the cluster's nodes can be measured (``probe``, once), and a ``Window`` per
    timed window."""

    def __init__(
        self,
        nodes: Sequence[str],
        read: Reader,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nodes = list(nodes)
        self.read = read
        self.interval_s = interval_s
        self.clock = clock
        self.problems: dict[str, str] = {}  # a node not sampled, and why
        self.sampled: list[str] = []
        self.probed = False

    def probe(self) -> dict[str, str]:
        """Ask every node once: those with a power source are sampled in every window; the
        others' problems (no source, no answer) are returned and kept."""
        self.problems, self.sampled = {}, []
        for outcome in fan_out(self.nodes, self.read, settle=True):
            if outcome.error is not None or outcome.value is None:
                self.problems[outcome.item] = f"no answer: {_said(outcome.error)}"
            elif not any(tier(r) is not None for r in outcome.value.readings):
                self.problems[outcome.item] = NO_SOURCE
            else:
                self.sampled.append(outcome.item)
        self.probed = True
        return dict(self.problems)

    def window(self) -> Window:
        if not self.probed:
            self.probe()
        return Window(self)


def _said(error: BaseException | None) -> str:
    text = str(error) if error is not None else "no answer"
    return escaped(text.splitlines()[0] if text else type(error).__name__, 200)


class Window:
    """One timed window: ``with meter.window() as window:`` around the timed work, then
    ``window.energy(tokens)``."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.samples: dict[str, list[Sample]] = {name: [] for name in meter.sampled}
        self.missed: dict[str, str] = {}  # a node whose start or end reading failed, and why
        self.start_s = self.end_s = 0.0
        self.finished = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Window:
        self.start_s = self.meter.clock()
        self._read_all("start")
        if self.meter.sampled:
            self._thread = threading.Thread(
                target=self._sample, name="halo-power-sampler", daemon=False
            )
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()  # its read in flight ends within READ_TIMEOUT_S
        if kind is None:
            self._read_all("end")
            self.finished = True
        self.end_s = self.meter.clock()

    def _sample(self) -> None:
        while not self._stop.wait(self.meter.interval_s):
            self._read_all(None)

    def _read_all(self, end: str | None) -> None:
        if not self.meter.sampled:
            return
        for outcome in fan_out(self.meter.sampled, self._timed, settle=True):
            with self._lock:
                if outcome.value is not None:
                    self.samples[outcome.item].append(outcome.value)
                elif end is not None:  # a reading inside the window may be missed
                    said = _said(outcome.error)
                    self.missed.setdefault(outcome.item, f"no reading at the {end}: {said}")

    def _timed(self, name: str) -> Sample:
        before = self.meter.clock()
        answer = self.meter.read(name)
        return Sample((before + self.meter.clock()) / 2, answer.readings)

    def energy(self, tokens: int) -> LevelEnergy:
        """Every node's energy over the window and the cluster's per output token."""
        seconds = max(self.end_s - self.start_s, 0.0)
        nodes, watts = [], {}
        for name in self.meter.nodes:
            problem = self.meter.problems.get(name) or self.missed.get(name)
            if problem is None and not self.finished:
                problem = "the window did not end (interrupted)"
            if problem is not None:
                nodes.append(NodeEnergy(name, seconds, problem=problem))
                continue
            samples = self.samples[name]
            nodes.append(node_energy(name, samples))
            watts[name] = watts_series(samples, samples[0].at_s)
        return LevelEnergy(ClusterEnergy(tuple(nodes), tokens), watts)
