"""What the supervisor on the head decides, as pure functions: the settings
(``[serve.supervise]``), the states a supervised server is in, and the policy that turns one
round of probes into the next action. The loop that probes and acts is ``node/supervisor.py``;
the controller's side (install, stop, status) is ``supervise/control.py``.

States::

    starting ──► serving ◄──────────────┐
                   │  crash / wedge      │ proven again
                   ▼                     │
               restarting ───────────────┘
                   │  K restarts within W s       a member unreachable (SSH, fabric)
                   ▼                              ──► degraded ──► (it answers) restarting
                 failed  (no more restarts until the user acts; memory guard too)

A restart is always the whole serving group, in the order it was first started. Restarts back
off exponentially (``backoff_s`` doubled per restart already in the window, at most
``backoff_max_s``); the (K+1)-th restart wanted within ``crash_window_s`` ends in ``failed``
instead, so a crash loop ends after exactly K attempts.

Standard library only (Python 3.9): the node side imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from halo_cluster.jsonout import JsonObject

STARTING, SERVING, DEGRADED, RESTARTING, FAILED, STOPPED = (
    "starting",
    "serving",
    "degraded",
    "restarting",
    "failed",
    "stopped",
)
STATES = (STARTING, SERVING, DEGRADED, RESTARTING, FAILED, STOPPED)
HISTORY_KEPT = 50  # state changes kept in the state file

# one metric value per state, for the exporter (halo_serve_state)
STATE_CODES = {STOPPED: 0, STARTING: 1, SERVING: 2, DEGRADED: 3, RESTARTING: 4, FAILED: 5}


@dataclass(frozen=True)
class SuperviseSettings:
    """``[serve.supervise]``: probe interval and deadline, backoff, crash-loop limits and the
    memory guard. Every duration is in seconds."""

    enabled: bool = True
    interval_s: float = 5.0  # between two rounds of probes
    deadline_s: float = 30.0  # a one-token generation must complete within this
    wedge_probes: int = 2  # failed generations in a row (processes alive) that make a wedge
    backoff_s: float = 2.0  # the first restart waits this long; doubled for each one after
    backoff_max_s: float = 60.0
    crash_restarts: int = 3  # K: restarts allowed within the window ...
    crash_window_s: float = 600.0  # W: ... before the state is 'failed'
    start_timeout_s: float = 900.0  # a restarted group must answer /health within this
    # the canary: one greedy prompt against the one-node reference at most this often, on a
    # healthy round (0: never; only where 'halo serve' compared tokens)
    canary_s: float = 300.0
    memory_min_available_pct: float = 3.0  # MemAvailable below this % of MemTotal: stop
    memory_max_pressure_pct: float = 60.0  # /proc/pressure/memory "full avg10" above: stop

    def to_dict(self) -> JsonObject:
        return dict(self.__dict__)

    @staticmethod
    def from_dict(data: Any) -> SuperviseSettings:
        """The settings as ``to_dict`` wrote them; a key it does not know is left out (a
        newer controller's), a value of the wrong type or out of its range is a
        ValueError of one line, naming the key and what it takes (``LIMITS``)."""
        if not isinstance(data, dict):
            raise ValueError("settings is not an object")
        values: dict[str, Any] = {}
        if "enabled" in data:
            if not isinstance(data["enabled"], bool):
                raise ValueError("settings.enabled is not true or false")
            values["enabled"] = data["enabled"]
        for key, (kind, low, high) in LIMITS.items():
            if key in data:
                values[key] = _setting(key, data[key], kind, low, high)
        return SuperviseSettings(**values)


# each numeric setting: its type, the least and the most it takes (the most: a week for a
# duration or a count, any more is a typo; 100 for a percentage of pressure)
WEEK_S = 86400.0 * 7
LIMITS: dict[str, tuple[type, float, float]] = {
    "interval_s": (float, 0.5, WEEK_S),
    "deadline_s": (float, 1.0, WEEK_S),
    "wedge_probes": (int, 1, WEEK_S),
    "backoff_s": (float, 0.0, WEEK_S),
    "backoff_max_s": (float, 0.0, WEEK_S),
    "crash_restarts": (int, 1, WEEK_S),
    "crash_window_s": (float, 1.0, WEEK_S),
    "start_timeout_s": (float, 5.0, WEEK_S),
    "canary_s": (float, 0.0, WEEK_S),
    "memory_min_available_pct": (float, 0.0, WEEK_S),
    "memory_max_pressure_pct": (float, 0.0, 100.0),
}


def _setting(key: str, value: Any, kind: type, low: float, high: float) -> float:
    """One numeric setting checked: a whole number where ``kind`` is int (a JSON number
    for a float; never a boolean), finite, between ``low`` and ``high``."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or (kind is int and not isinstance(value, int)):
        what = "a whole number" if kind is int else "a number"
        raise ValueError(f"settings.{key} is not {what}")
    if not low <= value <= high:  # NaN is in no range
        raise ValueError(f"settings.{key} is not between {low:g} and {high:g}")
    return int(value) if kind is int else float(value)


# -- one round of probes ------------------------------------------------------------------
@dataclass(frozen=True)
class MemberProbe:
    """One member node as the head saw it in one round."""

    name: str
    reachable: bool  # SSH (or, for the head, bash) answered
    alive: bool = True  # its engine process (pid file) runs
    fabric: bool | None = None  # its fabric address answered a ping from the head (None: not asked)
    mem_total_kib: int | None = None
    mem_available_kib: int | None = None
    pressure_full_avg10: float | None = None
    error: str = ""
    ray: bool | None = None  # its raylet runs (None: the server does not use Ray)


@dataclass(frozen=True)
class Probe:
    """One round: every member, /health on the head, and a one-token generation."""

    at: float
    members: tuple[MemberProbe, ...]
    health: bool
    generated: bool
    latency_s: float | None = None  # the generation's time, when it completed
    detail: str = ""  # why /health or the generation failed
    garbage: str = ""  # the canary's answer differed from the one-node reference: how


# -- what to do next -------------------------------------------------------------------------
NOTHING, RESTART, DEGRADE, FAIL, MEMORY_STOP = (
    "nothing",
    "restart",
    "degrade",
    "fail",
    "memory-stop",
)


@dataclass(frozen=True)
class Action:
    kind: str
    cause: str = ""
    wait_s: float = 0.0  # RESTART: the backoff before the attempt
    nodes: tuple[str, ...] = ()  # DEGRADE: the nodes lost


@dataclass
class Policy:
    """The decisions between probes: keeps the count of failed generations in a row and
    the times of the restarts within the window."""

    settings: SuperviseSettings
    wedged_rounds: int = 0
    restarts_at: list[float] = field(default_factory=list)

    def decide(self, state: str, probe: Probe) -> Action:
        """The action after ``probe`` while the server is in ``state``."""
        if state in (FAILED, STOPPED):
            return Action(NOTHING)
        lost = lost_members(probe)
        if lost:
            self.wedged_rounds = 0
            return Action(DEGRADE, f"lost {', '.join(n for n, _ in lost)}: " + lost[0][1],
                          nodes=tuple(n for n, _ in lost))  # fmt: skip
        memory = memory_problem(self.settings, probe)
        if memory:
            return Action(MEMORY_STOP, memory)
        if state == DEGRADED:  # every member answers again: bring the group back
            return self.restart(probe.at, "every member answers again")
        dead = [m.name for m in probe.members if not m.alive]
        if dead:
            return self.restart(probe.at, f"the engine's process exited on {', '.join(dead)}")
        rayless = [m.name for m in probe.members if m.ray is False]
        if rayless:
            return self.restart(probe.at, f"Ray is not running on {', '.join(rayless)}")
        if probe.garbage:  # answers behind a green /health that are not the model's
            return self.restart(probe.at, f"garbage: {probe.garbage}")
        if probe.health and probe.generated:
            self.wedged_rounds = 0
            return Action(NOTHING)
        self.wedged_rounds += 1
        if self.wedged_rounds < self.settings.wedge_probes:
            return Action(NOTHING)
        what = "/health answers but " if probe.health else ""
        cause = f"wedged: {what}no token within {self.settings.deadline_s:g} s for " + (
            f"{self.wedged_rounds} probes in a row ({probe.detail})" if probe.detail else
            f"{self.wedged_rounds} probes in a row"
        )  # fmt: skip
        return self.restart(probe.at, cause)

    def restart(self, now: float, cause: str) -> Action:
        """A restart with its backoff, or ``failed`` when K restarts are already in the window."""
        self.wedged_rounds = 0
        window = self.settings.crash_window_s
        self.restarts_at = [t for t in self.restarts_at if now - t < window]
        done = len(self.restarts_at)
        if done >= self.settings.crash_restarts:
            return Action(
                FAIL,
                f"crash loop: {done} restarts within {window:g} s did not keep it up; "
                f"last cause: {cause}",
            )
        self.restarts_at.append(now)
        # the first restart in the window at once (a crash is rare); the next ones back off
        wait = 0.0 if done == 0 else self.settings.backoff_s * (2 ** (done - 1))
        wait = min(self.settings.backoff_max_s, wait)
        return Action(RESTART, cause, wait_s=wait)


def lost_members(probe: Probe) -> list[tuple[str, str]]:
    """(name, why) of each member the head cannot reach: SSH or its fabric address."""
    lost = []
    for member in probe.members:
        if not member.reachable:
            lost.append((member.name, member.error or "it does not answer"))
        elif member.fabric is False:
            lost.append((member.name, member.error or "its fabric address does not answer"))
    return lost


def memory_problem(settings: SuperviseSettings, probe: Probe) -> str:
    """Why the memory guard stops the engine now ('' when it does not)."""
    for m in probe.members:
        total, available = m.mem_total_kib, m.mem_available_kib
        if total and available is not None:
            pct = 100.0 * available / total
            if pct < settings.memory_min_available_pct:
                return (
                    f"memory guard: {m.name} had {available / 1048576:.1f} GiB available "
                    f"({pct:.1f} % of {total / 1048576:.1f} GiB, below "
                    f"{settings.memory_min_available_pct:g} %): stopped the engine before "
                    "the node froze"
                )
        pressure = m.pressure_full_avg10
        if pressure is not None and pressure > settings.memory_max_pressure_pct:
            return (
                f"memory guard: {m.name}'s memory pressure (full avg10) was {pressure:g} % "
                f"(above {settings.memory_max_pressure_pct:g} %): stopped the engine before "
                "the node froze"
            )
    return ""


# -- the probe script's answer (pure) -------------------------------------------------------
def parse_member_answer(name: str, text: str) -> MemberProbe:
    """A member's answer to the probe script (``key=value`` lines: alive, MemTotal,
    MemAvailable, the PSI 'full' line); an unreadable value is left out, never guessed."""
    values = key_values(text)
    return MemberProbe(
        name=name,
        reachable=True,
        alive=values.get("alive") == "1",
        fabric=_flag(values.get("fabric")),
        mem_total_kib=count(values.get("mem_total_kib")),
        mem_available_kib=count(values.get("mem_available_kib")),
        pressure_full_avg10=_pressure(values.get("psi_full")),
        ray=_flag(values.get("ray")),
    )


def _flag(text: str | None) -> bool | None:
    return None if text not in ("0", "1") else text == "1"


def key_values(text: str) -> dict[str, str]:
    """``key=value`` lines (a node script's answer); other lines are left out."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def count(text: str | None) -> int | None:
    """A whole number of at most 18 digits, else None (never guessed)."""
    if text is None or len(text) > 18 or not text.isascii() or not text.isdigit():
        return None  # isdigit alone also takes '²', which int() refuses
    return int(text)


def _pressure(line: str | None) -> float | None:
    """``avg10=1.23 avg60=… total=…`` -> 1.23."""
    for word in (line or "").split():
        if word.startswith("avg10="):
            try:
                value = float(word[6:])
            except ValueError:
                return None
            return value if 0.0 <= value <= 100.0 else None
    return None


# -- a start that makes no progress ------------------------------------------------------------
# (issue 47, item 6) While a start waits for an engine's /health, each member's log and what
# its process group read from and wrote to storage (a node's answer to
# ``engines.scripts.progress_script``) are watched; when none of them moved for ``stall_s``,
# the load has stalled and the start fails with that cause, instead of "starting" for as long
# as the wait allows. One node may wait on another (a worker for its head's rendezvous): only
# every node still at once is a stall. Used by 'halo serve' and by the supervisor's restarts.

CHECK_EVERY_S = 10.0  # how often halo asks while it waits


@dataclass(frozen=True)
class Progress:
    """One member's signs of progress (None where its answer did not say)."""

    log_bytes: int | None
    io_bytes: int | None  # read from and written to storage by its process group


def parse_progress(text: str) -> Progress:
    values = key_values(text)
    return Progress(count(values.get("log_bytes")), count(values.get("io_bytes")))


@dataclass
class StallWatch:
    """The last time any member's log or reads moved, over the answers seen so far."""

    stall_s: float
    since: float | None = None
    seen: dict[str, Progress] = field(default_factory=dict)

    def observe(self, now: float, answers: dict[str, str]) -> None:
        """One round of answers (node -> its text) at ``now``."""
        progress = {node: parse_progress(text) for node, text in answers.items()}
        moved = any(
            found != self.seen.get(node) and found != Progress(None, None)
            for node, found in progress.items()
        )
        if self.since is None or moved:
            self.since = now
        self.seen = progress

    def stalled(self, now: float) -> str | None:
        """The cause when nothing moved for ``stall_s`` (one line), else None."""
        if self.since is None or now - self.since < self.stall_s:
            return None
        took = f"{self.stall_s / 60:g} min" if self.stall_s >= 120 else f"{self.stall_s:g} s"
        held = ", ".join(
            f"{node} log {_bytes(found.log_bytes)}, storage {_bytes(found.io_bytes)}"
            for node, found in sorted(self.seen.items())
        )
        return (
            f"no progress for {took} while loading: no new log line and nothing read or "
            f"written on any node ({held})"
        )


def _bytes(value: int | None) -> str:
    return "unread" if value is None else f"{value} B"
