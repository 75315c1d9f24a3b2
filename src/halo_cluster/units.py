"""Small shared unit helpers: sizes for people to read."""

from __future__ import annotations


def human_bytes(size: float) -> str:
    """A byte count in binary units: 8B, 64KiB, 1.5MiB, 2GiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale
            return f"{value:g}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{int(size)}B"
