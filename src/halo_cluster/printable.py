"""Text from outside halo (what a node printed, a log, a file, a value or comment from a
config) made safe to show on a terminal. Every path that prints such text goes through
``printable``: a control character, an ANSI escape, a bidirectional override (U+202E) or
any other character that is not printable is shown escaped (``\\x1b``, ``\\u202e``), never
interpreted, so nothing read can clear the screen, move the cursor or reorder a line.

Rich markup is the CLI's business (``cli/output.safe`` adds Rich's escaping on top of this);
this module is pure and runs on nodes too (Python 3.9)."""

from __future__ import annotations

ELLIPSIS = "…"


def printable(value: object, *, lines: bool = False, limit: int | None = None) -> str:
    """``value`` as text that shows as itself: every character that is not printable
    escaped as Python writes it in a string (``\\x1b``, ``\\u202e``, ``\\n``).

    ``lines``: newlines and tabs are kept (a log, a table cell of several lines).
    ``limit``: at most that many characters of ``value`` (then ``…``)."""
    text = str(value)
    if limit is not None and len(text) > limit:
        text = text[:limit] + ELLIPSIS
    if lines:
        return "\n".join(_escaped(line, "\t") for line in text.split("\n"))
    return _escaped(text, "")


def quoted(value: object, limit: int = 60) -> str:
    """``printable`` in single quotes, at most ``limit`` characters: a value named in a
    one-line message."""
    return f"'{printable(value, limit=limit)}'"


def _escaped(text: str, kept: str) -> str:
    if text.isprintable():  # the common case, at C speed
        return text
    return "".join(c if c.isprintable() or c in kept else ascii(c)[1:-1] for c in text)
