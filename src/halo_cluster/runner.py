"""Side effects behind one method: ``Runner.run(argv, stdin, timeout) -> Result``.

LocalRunner runs a process here; SSHRunner runs argv on a node through the system ``ssh``
(BatchMode, ConnectTimeout, the user's ssh config honoured) with the remote command quoted
word by word, so no argument is ever re-split by the remote shell; FakeRunner answers from
a table, for tests.

``on_line`` (optional) receives each stdout line while the command runs, for the progress of
long remote work (the benchmark driver); the Result still carries the whole output.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

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


RAY_TOKEN_ENV = "HALO_RAY_TOKEN"  # a Ray auth token in a script's env (see cluster/auth.py)


def exports(env: Mapping[str, str]) -> str:
    """``export NAME=value`` lines for a script fed to ``bash -s``, every value quoted. A Ray
    token (``RAY_TOKEN_ENV``) becomes a 0600 token file in the node's state directory and
    ``RAY_AUTH_MODE=token`` + ``RAY_AUTH_TOKEN_PATH`` pointing at it."""
    lines = [f"export {k}={shlex.quote(v)}\n" for k, v in env.items() if k != RAY_TOKEN_ENV]
    token = env.get(RAY_TOKEN_ENV)
    if token:
        import hashlib

        name = f"ray-{hashlib.sha256(token.encode()).hexdigest()[:12]}.token"
        lines += [
            '_halo_state="${XDG_STATE_HOME:-$HOME/.local/state}/halo"\n',
            f'(umask 077 && mkdir -p "$_halo_state" && printf %s {shlex.quote(token)} '
            f'> "$_halo_state/{name}")\n',
            f'export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$_halo_state/{name}"\n',
        ]
    return "".join(lines)


class Runner(Protocol):
    def run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        timeout: float = 30.0,
        on_line: LineSink | None = None,
    ) -> Result: ...


class LocalRunner:
    def run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        timeout: float = 30.0,
        on_line: LineSink | None = None,
    ) -> Result:
        args = tuple(argv)
        if on_line is not None:
            return _streamed(args, stdin, timeout, on_line)
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
        except OSError as err:
            return _not_started(args, err)
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

    def run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        timeout: float = 30.0,
        on_line: LineSink | None = None,
    ) -> Result:
        result = self.local.run(self.ssh_argv(argv), stdin, timeout, on_line)
        return Result(tuple(argv), result.returncode, result.stdout, result.stderr)


@dataclass
class FakeRunner:
    """Answers by the first matching rule: (argv prefix, Result or function of argv)."""

    rules: list[tuple[tuple[str, ...], Result | Callable[[tuple[str, ...]], Result]]] = field(
        default_factory=list
    )
    calls: list[tuple[str, ...]] = field(default_factory=list)
    stdins: list[str | None] = field(default_factory=list)

    def on(
        self, prefix: Sequence[str], answer: Result | Callable[[tuple[str, ...]], Result]
    ) -> FakeRunner:
        self.rules.append((tuple(prefix), answer))
        return self

    def run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        timeout: float = 30.0,
        on_line: LineSink | None = None,
    ) -> Result:
        args = tuple(argv)
        self.calls.append(args)
        self.stdins.append(stdin)
        for prefix, answer in self.rules:
            if args[: len(prefix)] == prefix:
                result = answer(args) if callable(answer) else answer
                for line in result.stdout.splitlines() if on_line else ():
                    on_line(line)  # type: ignore[misc]
                return result
        return Result(args, NOT_FOUND, "", f"{args[0]}: command not found")


def _not_started(args: tuple[str, ...], err: OSError) -> Result:
    """A program that could not be started, with the shell's exit codes: 127 when it is not
    found (also when a PATH entry cannot be searched), 126 otherwise."""
    if isinstance(err, FileNotFoundError | PermissionError) and "/" not in args[0]:
        return Result(args, NOT_FOUND, "", f"{args[0]}: command not found")
    return Result(args, CANNOT_RUN, "", f"{args[0]}: {err.strerror or err}")


def _streamed(
    args: tuple[str, ...], stdin: str | None, timeout: float, on_line: LineSink
) -> Result:
    """Run ``args`` handing each stdout line to ``on_line`` as it comes (progress of long
    remote work). The process is killed on timeout and on Ctrl-C (which is then re-raised)."""
    import threading

    try:
        process = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
        )
    except OSError as err:
        return _not_started(args, err)
    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        process.kill()

    timer = threading.Timer(timeout, expire)
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.append(process.stderr.read()), daemon=True)  # type: ignore[union-attr]
    lines: list[str] = []
    try:
        timer.start()
        reader.start()
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(stdin or "")
            process.stdin.close()
        except BrokenPipeError:
            pass
        for line in process.stdout:
            lines.append(line)
            on_line(line.rstrip("\n"))
        process.wait()
        reader.join(5)
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        timer.cancel()
    if timed_out.is_set():
        return Result(args, TIMED_OUT, "".join(lines), f"timed out after {timeout:g} s")
    return Result(args, process.returncode, "".join(lines), "".join(errors))
