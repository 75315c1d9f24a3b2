"""Shared output helpers: JSON to stdout, Rich tables built lazily."""

from __future__ import annotations

import json
import math
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def emit_json(data: Any) -> None:
    """Strict JSON: a number that is not finite (NaN, Infinity) is written as null."""
    json.dump(finite(data), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


def finite(data: Any) -> Any:
    """``data`` with every NaN/Infinity replaced by None (JSON has no such numbers)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [finite(v) for v in data]
    return data


def console() -> Console:
    from rich.console import Console

    out = Console(highlight=False, emoji=False)
    if not out.is_terminal:  # piped or captured: do not squeeze tables into 80 columns
        out = Console(highlight=False, emoji=False, width=160)
    return out


def table(title: str, *columns: str) -> Table:
    from rich.table import Table

    grid = Table(title=title, title_justify="left", title_style="bold")
    for column in columns:
        grid.add_column(column)
    return grid


def dash(value: object) -> str:
    """A cell: '-' for unknown values."""
    if value is None or value == "" or value == ():
        return "-"
    return str(value)
