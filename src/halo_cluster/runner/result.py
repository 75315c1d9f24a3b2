"""What every Runner returns, and the one method every Runner has: ``run`` for callers,
which hands a runner the command as one value (``Call``) to ``execute``.

``on_line`` (optional) receives each stdout line while the command runs (progress of long
remote work); the Result has the whole output. A command that cannot run at all answers
with the shell's own exit codes (``NOT_FOUND``, ``CANNOT_RUN``), one that ran too long with
``TIMED_OUT`` (as coreutils' ``timeout``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

TIMED_OUT = 124
CANNOT_RUN = 126
NOT_FOUND = 127


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def error_text(self) -> str:
        text = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return text[-1] if text else f"exit code {self.returncode}"


LineSink = Callable[[str], None]


@dataclass(frozen=True)
class Call:
    """One command for a runner: its argv, what is written to its stdin, how long it may
    run, and where each stdout line goes as it comes."""

    argv: tuple[str, ...]
    stdin: str | None = None
    timeout: float = 30.0
    on_line: LineSink | None = None


class Runner(ABC):
    """Runs a command to completion. A runner that wraps another calls the other's ``run``
    (a test's stand-in may have only that)."""

    def run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        timeout: float = 30.0,
        on_line: LineSink | None = None,
    ) -> Result:
        return self.execute(Call(tuple(argv), stdin, timeout, on_line))

    @abstractmethod
    def execute(self, call: Call) -> Result: ...
