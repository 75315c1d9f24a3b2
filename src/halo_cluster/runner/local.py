"""LocalRunner: a process on this machine, run to completion (``run``) or left running in
the background for its owner to end (``start``). The one place halo starts processes
(``tests/test_architecture.py`` allows no other, but for two commands that hand the
user's terminal to a program)."""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
import time
from collections.abc import Sequence
from functools import partial
from typing import IO

from halo_cluster.runner.output import STDERR_CAP, STDOUT_CAP, Kept, read_lines
from halo_cluster.runner.result import (
    CANNOT_RUN,
    NOT_FOUND,
    TIMED_OUT,
    Call,
    LineSink,
    Result,
    Runner,
)


class LocalRunner(Runner):
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

    def execute(self, call: Call) -> Result:
        """Run ``argv`` to completion: ``stdin`` written to it, its output kept up to
        ``runner.output``'s caps (each stdout line to ``on_line`` as it comes, when given).
        Killed on timeout (what it printed until then is kept) and on Ctrl-C (re-raised)."""
        args = call.argv
        try:
            process = subprocess.Popen(
                args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except OSError as err:
            return _not_started(args, err)
        return _complete(process, args, call.stdin, call.timeout, call.on_line)


def _not_started(args: tuple[str, ...], err: OSError) -> Result:
    """A program that could not be started, with the shell's exit codes: 127 when it is not
    found (also when a PATH entry cannot be searched), 126 otherwise."""
    searched = isinstance(err, PermissionError) and "/" not in args[0]  # a PATH entry
    if isinstance(err, FileNotFoundError) or searched:
        said = f"{args[0]}: " + (str(err.strerror) if "/" in args[0] else "command not found")
        return Result(args, NOT_FOUND, "", said)
    return Result(args, CANNOT_RUN, "", f"{args[0]}: {err.strerror or err}")


def _complete(
    process: subprocess.Popen[bytes],
    args: tuple[str, ...],
    stdin: str | None,
    timeout: float,
    on_line: LineSink | None,
) -> Result:
    """Feed, read and wait for ``process`` within ``timeout``: each stream in its own thread
    (none can fill its pipe while another is written or read), ``on_line`` called here."""
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    deadline = time.monotonic() + timeout
    out, err = Kept(STDOUT_CAP), Kept(STDERR_CAP)
    lines = _Lines()
    if on_line is None:
        read_out = partial(out.drain, process.stdout)
    else:
        read_out = partial(lines.read, process.stdout, out)
    threads = [
        threading.Thread(target=_feed, args=(process.stdin, stdin), daemon=True),
        threading.Thread(target=read_out, daemon=True),
        threading.Thread(target=err.drain, args=(process.stderr,), daemon=True),
    ]
    try:
        for thread in threads:
            thread.start()
        finished = lines.hand(on_line, deadline) if on_line else True
        finished = finished and _wait(process, threads, deadline)
    except BaseException:
        lines.abandoned.set()
        process.kill()
        process.wait()
        raise
    if not finished:  # a reader still blocked (a child holds the pipe) keeps its stream
        lines.abandoned.set()
        process.kill()
        process.wait()
        return Result(args, TIMED_OUT, out.text(), f"timed out after {timeout:g} s")
    process.stdout.close()
    process.stderr.close()
    return Result(args, process.returncode, out.text(), err.text())


def _feed(pipe: IO[bytes], stdin: str | None) -> None:
    # it may exit (or close its stdin) without reading it all
    with contextlib.suppress(OSError, ValueError), pipe:
        pipe.write((stdin or "").encode())


class _Lines:
    """stdout's lines from the reader thread to ``on_line`` in the caller's, those of each
    read together (a few reads at a time: the reader waits for a slow ``on_line``, unless
    the caller has given up)."""

    def __init__(self) -> None:
        self.queue: queue.Queue[list[str] | None] = queue.Queue(maxsize=16)
        self.abandoned = threading.Event()

    def put(self, lines: list[str] | None) -> None:
        while not self.abandoned.is_set():
            with contextlib.suppress(queue.Full):
                self.queue.put(lines, timeout=0.5)
                return

    def read(self, stream: IO[bytes], kept: Kept) -> None:
        try:
            read_lines(stream, kept, self.put)
        finally:
            self.put(None)

    def hand(self, on_line: LineSink, deadline: float) -> bool:
        """Each line to ``on_line`` until stdout ends (True) or the deadline passes."""
        while True:
            try:
                lines = self.queue.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                return False
            if lines is None:
                return True
            for line in lines:
                on_line(line)


def _wait(
    process: subprocess.Popen[bytes], threads: list[threading.Thread], deadline: float
) -> bool:
    """The process ended and its output was read to the end, before the deadline."""
    try:
        process.wait(max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        return False
    for thread in threads[1:]:  # a child of it may still hold its stdout or stderr open
        thread.join(max(deadline - time.monotonic(), 0))
        if thread.is_alive():
            return False
    return True
