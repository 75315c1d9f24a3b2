"""The one exception tree of halo.

    HaloError                 anything halo reports to the user as a one-line message
    ├── ParseError            file or tool output halo cannot understand (path + text)
    ├── UsageError            the user asked for something impossible (exit code 2)
    └── TransportError        a requested transport the node cannot provide

The CLI catches HaloError, prints ``str(err)`` on one line and exits with
``err.exit_code``; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class HaloError(Exception):
    """Base class: a problem halo explains in one line."""

    exit_code = 1


class ParseError(HaloError):
    """Content halo cannot parse. ``path`` is filled in by the reader that knows it."""

    def __init__(self, reason: str, text: str = "", path: str | None = None) -> None:
        self.reason = reason
        self.text = text
        self.path = path
        super().__init__(self.describe())

    def describe(self) -> str:
        shown = self.text if len(self.text) <= 120 else self.text[:117] + "..."
        where = f"{self.path}: " if self.path else ""
        return f"{where}{self.reason} (content {shown!r})"

    def at(self, path: str) -> ParseError:
        """The same error, located at ``path``."""
        return ParseError(self.reason, self.text, path)


class UsageError(HaloError):
    """Bad arguments or a bad root directory."""

    exit_code = 2


class TransportError(HaloError):
    """The requested transport cannot work on this node."""


class RayNodesError(HaloError):
    """The local Ray cluster's node table cannot be read, or nodes did not register."""
