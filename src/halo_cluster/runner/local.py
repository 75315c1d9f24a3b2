"""LocalRunner: a process on this machine, run to completion (``run``) or left running in
the background for its owner to end (``start``). The one place halo starts processes
(``tests/test_architecture.py`` allows no other, but for two commands that hand the
user's terminal to a program)."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Sequence
from typing import IO

from halo_cluster.runner.result import CANNOT_RUN, NOT_FOUND, TIMED_OUT, LineSink, Result


class LocalRunner:
    def start(
        self,
        argv: Sequence[str],
        stderr: int | IO[bytes] = subprocess.DEVNULL,
        new_session: bool = False,
    ) -> subprocess.Popen[bytes]:
        """A process that keeps running in the background (a lab node's init, an SSH tunnel, a
        load generator): no stdin, stdout discarded, stderr where asked; its owner ends it."""
        out = subprocess.DEVNULL
        return subprocess.Popen(
            list(argv), stdin=out, stdout=out, stderr=stderr, start_new_session=new_session
        )

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


def _not_started(args: tuple[str, ...], err: OSError) -> Result:
    """A program that could not be started, with the shell's exit codes: 127 when it is not
    found (also when a PATH entry cannot be searched), 126 otherwise."""
    searched = isinstance(err, PermissionError) and "/" not in args[0]  # a PATH entry
    if isinstance(err, FileNotFoundError) or searched:
        said = f"{args[0]}: " + (str(err.strerror) if "/" in args[0] else "command not found")
        return Result(args, NOT_FOUND, "", said)
    return Result(args, CANNOT_RUN, "", f"{args[0]}: {err.strerror or err}")


def _streamed(
    args: tuple[str, ...], stdin: str | None, timeout: float, on_line: LineSink
) -> Result:
    """Run ``args`` handing each stdout line to ``on_line`` as it comes (progress of long
    remote work). The process is killed on timeout and on Ctrl-C (which is then re-raised)."""
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
