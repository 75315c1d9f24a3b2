"""Shared output helpers: JSON to stdout, Rich tables built lazily."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def emit_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")


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
