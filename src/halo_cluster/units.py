"""Small shared unit helpers: sizes for people to read, durations, listen addresses."""

from __future__ import annotations

import re


def human_bytes(size: float) -> str:
    """A byte count in binary units: 8B, 64KiB, 1.5MiB, 2GiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale
            return f"{value:g}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{int(size)}B"


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
MAX_DURATION_S = 86400.0  # a day: no interval, timeout or sleep of ours is longer


def parse_duration(text: str) -> float:
    """Seconds from ``500ms``, ``1s``, ``5m``, ``1h`` or plain seconds, more than zero and at
    most a day; ValueError otherwise."""
    match = _DURATION.match(text.strip()) if len(text) <= 64 else None
    if not match:
        raise ValueError(f"{text[:40]!r} is not a duration like 500ms, 1s or 5m")
    scale = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[match.group(2) or "s"]
    value = float(match.group(1)) * scale
    if value <= 0:
        raise ValueError(f"{text!r}: must be more than zero")
    if value > MAX_DURATION_S:
        raise ValueError(f"{text!r}: must be at most 24h")
    return value


def wait_seconds(value: float) -> float:
    """A duration fit for ``Event.wait``/``time.sleep``: 0 to MAX_DURATION_S (NaN is 0), so
    that no value, however it was computed, can raise OverflowError in a waiting thread."""
    return min(value, MAX_DURATION_S) if value > 0 else 0.0


def parse_listen(text: str) -> tuple[str, int]:
    """``ADDR:PORT`` (IPv6 in brackets) as (address, port); ValueError otherwise."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r}: use ADDR:PORT with a port 1-65535, e.g. 127.0.0.1:9877")
    return host.strip("[]"), int(port)
