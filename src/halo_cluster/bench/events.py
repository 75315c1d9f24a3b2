"""The bench driver's JSON lines: ``{"event": "progress", "message"}``, ``{"event": "row",
"row"}``, then one ``result`` or ``error``. Written on the head, read on the controller."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from halo_cluster.bounded.jsonin import loads

Emit = Callable[[dict[str, Any]], None]


def read_events(lines: Iterator[str] | Sequence[str]) -> tuple[dict[str, Any] | None, str | None]:
    """(result, error) from a driver's JSON lines; lines that are not events are ignored."""
    result, error = None, None
    for line in lines:
        try:
            event = loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        if event.get("event") == "result":
            result = event.get("result")
        elif event.get("event") == "error":
            error = str(event.get("message"))
    return result, error
