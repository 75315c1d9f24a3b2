"""Shared output helpers for the commands: the Rich console and tables, built lazily (JSON is
``jsonout.emit_json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from halo_cluster.printable import printable

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text


def console() -> Console:
    from rich.console import Console

    out = Console(highlight=False, emoji=False)
    if not out.is_terminal:  # piped or captured: do not squeeze tables into 80 columns
        out = Console(highlight=False, emoji=False, width=160)
    return out


def plain(value: object) -> str:
    """Text from outside halo, for a terminal (``printable`` with its lines kept): control
    characters, ANSI escapes and bidi overrides shown escaped, never interpreted."""
    return printable(value, lines=True)


def safe(value: object) -> str:
    """``plain`` and inert for Rich: markup in the data (``[/x]``, ``[link=…]``) is shown
    as it is, never styles or breaks the output."""
    from rich.markup import escape

    return escape(plain(value))


def styled(markup: str) -> Text:
    """Intended styling (halo's own words), for a table cell: only this is markup."""
    from rich.text import Text

    return Text.from_markup(markup)


def table(title: str, *columns: str) -> Table:
    """A Rich table whose plain-string cells are data: shown with ``safe``; halo's own
    styling goes in as ``styled(...)``."""
    from rich.table import Table

    class DataTable(Table):
        def add_row(self, *cells: Any, **options: Any) -> None:
            super().add_row(*(safe(c) if isinstance(c, str) else c for c in cells), **options)

    grid = DataTable(title=safe(title), title_justify="left", title_style="bold")
    for column in columns:
        grid.add_column(column)
    return grid


def dash(value: object) -> str:
    """A cell: '-' for unknown values."""
    if value is None or value == "" or value == ():
        return "-"
    return str(value)
