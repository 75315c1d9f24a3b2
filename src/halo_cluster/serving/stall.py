"""A start that makes no progress (issue 47, item 6): while halo waits for an engine's
/health, each member's log and what its process group read from and wrote to storage (a
node's answer to ``engines.scripts.progress_script``) are watched; when none of them moved
for ``stall_s``, the load has stalled and the start fails with that cause, instead of
"starting" for as long as the wait allows. One node may wait on another (a worker for its
head's rendezvous): only every node still at once is a stall. Pure: answers in, a verdict
out."""

from __future__ import annotations

from dataclasses import dataclass, field

from halo_cluster.supervision import count, key_values

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
