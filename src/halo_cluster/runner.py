"""Side effects behind one method: ``Runner.run(argv, stdin, timeout) -> Result``.

LocalRunner runs a process here; SSHRunner runs argv on a node through the system ``ssh``
(BatchMode, ConnectTimeout, the user's ssh config honoured) with the remote command quoted
word by word, so no argument is ever re-split by the remote shell; FakeRunner answers from
a table, for tests.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

TIMED_OUT = 124
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


class Runner(Protocol):
    def run(
        self, argv: Sequence[str], stdin: str | None = None, timeout: float = 30.0
    ) -> Result: ...


class LocalRunner:
    def run(self, argv: Sequence[str], stdin: str | None = None, timeout: float = 30.0) -> Result:
        args = tuple(argv)
        try:
            done = subprocess.run(
                args,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                errors="replace",
            )
        except subprocess.TimeoutExpired:
            return Result(args, TIMED_OUT, "", f"timed out after {timeout:g} s")
        except FileNotFoundError:
            return Result(args, NOT_FOUND, "", f"{args[0]}: command not found")
        return Result(args, done.returncode, done.stdout, done.stderr)


@dataclass(frozen=True)
class SSHRunner:
    target: str
    ssh_config: Path | None = None
    connect_timeout_s: int = 5
    local: Runner = field(default_factory=LocalRunner)

    def ssh_argv(self, argv: Sequence[str]) -> list[str]:
        command = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout_s}"]
        if self.ssh_config is not None:
            command += ["-F", str(self.ssh_config)]
        # ssh hands the remote side one string: quote every word so it is parsed back exactly.
        return [*command, self.target, "--", shlex.join(argv)]

    def run(self, argv: Sequence[str], stdin: str | None = None, timeout: float = 30.0) -> Result:
        result = self.local.run(self.ssh_argv(argv), stdin, timeout)
        return Result(tuple(argv), result.returncode, result.stdout, result.stderr)


@dataclass
class FakeRunner:
    """Answers by the first matching rule: (argv prefix, Result or function of argv)."""

    rules: list[tuple[tuple[str, ...], Result | Callable[[tuple[str, ...]], Result]]] = field(
        default_factory=list
    )
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def on(
        self, prefix: Sequence[str], answer: Result | Callable[[tuple[str, ...]], Result]
    ) -> FakeRunner:
        self.rules.append((tuple(prefix), answer))
        return self

    def run(self, argv: Sequence[str], stdin: str | None = None, timeout: float = 30.0) -> Result:
        args = tuple(argv)
        self.calls.append(args)
        for prefix, answer in self.rules:
            if args[: len(prefix)] == prefix:
                return answer(args) if callable(answer) else answer
        return Result(args, NOT_FOUND, "", f"{args[0]}: command not found")
