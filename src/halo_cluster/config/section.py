"""One engine's table of ``halo.toml`` (``[serve.vllm]``, ``[serve.llama_cpp]``), kept as read
and handed to the engine, which alone knows its keys. The typed getters turn a wrong value
into one line naming the file, the line and the field (``serve.vllm.executor``)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halo_cluster.errors import ConfigError
from halo_cluster.printable import quoted

# in any engine's table, ``command`` is a command line (split as a shell does): halo.toml's
# loading checks it, so a bad one is an error there, not when a serve starts
COMMAND_KEY = "command"


@dataclass(frozen=True)
class Section:
    """``[serve.<name>]`` as written; ``lines``: the file's text, to say where a key is."""

    path: Path
    name: str  # the table's key under [serve], e.g. "llama_cpp"
    table: Mapping[str, Any] = field(default_factory=dict)
    lines: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"serve.{self.name}"

    def error(self, key: str, message: str) -> ConfigError:
        line = self._line(key)
        return ConfigError(f"{self.path}{f':{line}' if line else ''}: {message}")

    def _line(self, key: str) -> int | None:
        """The line of ``key`` after the ``[serve.<name>]`` header (or the header's own)."""
        return self.line_in(f"serve.{self.name}", key)

    def line_in(self, table: str, key: str) -> int | None:
        """The line of ``key`` in the table ``[table]`` (else the header's, else None)."""
        dotted = r"\s*\.\s*".join(rf"\"?{re.escape(part)}\"?" for part in table.split("."))
        header = re.compile(rf"^\s*\[\s*{dotted}\s*\]")
        wanted = re.compile(rf"^\s*{re.escape(key)}\s*=")
        inside, found = False, None
        for number, line in enumerate(self.lines, start=1):
            if header.match(line):
                inside, found = True, number
            elif re.match(r"^\s*\[", line):
                inside = False
            elif inside and wanted.match(line):
                return number
        return found

    def only(self, known: tuple[str, ...]) -> None:
        for key in self.table:
            if key not in known:
                shown = ", ".join(known)
                raise self.error(key, f"unknown key {self.label}.{key} (known: {shown})")

    def number(self, key: str, default: int | None, maximum: int | None = None) -> int | None:
        """A whole number >= 1 (and <= ``maximum``), or ``default`` when absent."""
        value = self.table.get(key)
        if value is None:
            return default
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise self.error(key, f"{self.label}.{key} must be a whole number >= 1")
        if maximum is not None and value > maximum:
            raise self.error(key, f"{self.label}.{key} must be at most {maximum}")
        return value

    def amount(self, key: str, default: float, maximum: float) -> float:
        """A number >= 0 and <= ``maximum`` (a size, a share of one), or ``default``."""
        value = self.table.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(key, f"{self.label}.{key} must be a number >= 0")
        if not 0 <= value <= maximum:  # NaN fails this too
            raise self.error(key, f"{self.label}.{key} must be from 0 to {maximum:g}")
        return float(value)

    def fraction(self, key: str) -> float | None:
        """A number in (0, 1], or None when absent."""
        value = self.table.get(key)
        if value is None:
            return None
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 1:
            raise self.error(key, f"{self.label}.{key} must be in (0, 1]")
        return float(value)

    def flag(self, key: str) -> bool | None:
        value = self.table.get(key)
        if value is not None and not isinstance(value, bool):
            raise self.error(key, f"{self.label}.{key} must be true or false")
        return value

    def text(self, key: str, default: str) -> str:
        value = self.table.get(key, default)
        if not isinstance(value, str):
            raise self.error(key, f"{self.label}.{key} must be a string")
        return value

    def words(self, key: str) -> tuple[str, ...]:
        """A list of strings (each one word of a command line, as given), () when absent."""
        value = self.table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(w, str) and w for w in value):
            raise self.error(key, f"{self.label}.{key} must be a list of non-empty strings")
        return tuple(value)

    def command(self, key: str, default: str) -> str:
        """A command line: split as a shell does (quotes closed) into at least a program."""
        value = self.text(key, default)
        try:
            words = shlex.split(value)
        except ValueError as err:
            raise self.error(key, f"{self.label}.{key}: {err} in {quoted(value)}") from None
        if not words:
            raise self.error(key, f"{self.label}.{key} names no program")
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.text(key, default)
        if value not in choices:
            shown = " or ".join(f'"{c}"' for c in choices)
            raise self.error(key, f"{self.label}.{key} must be {shown}")
        return value
