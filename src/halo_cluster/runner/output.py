"""What halo keeps of a command's output: a bounded part of it, whatever the command prints
(a node printing 300 MB once made the controller hold 904 MB). Each stream keeps its first
and its last bytes up to a cap, and says in the text how many bytes were cut between them;
a streamed line longer than ``LINE_CAP`` reaches its reader as its start and the count cut.

The caps are far above any answer a node gives (its largest, the inventory, is tens of KB,
a benchmark driver's whole event stream a few MB): a cut answer is a command gone wrong."""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable
from typing import IO

STDOUT_CAP = 16 << 20
STDERR_CAP = 1 << 20
LINE_CAP = 1 << 20  # one streamed line, as its reader sees it
CHUNK = 64 << 10
_NEWLINE = re.compile(r"\r\n|\r|\n")  # as text mode reads them


def cut_note(count: int) -> str:
    return f"[... {count} bytes cut ...]"


def as_text(data: bytes) -> str:
    """Bytes as text mode would read them (undecodable bytes replaced, ``\\r\\n`` and ``\\r``
    read as ``\\n``)."""
    return _NEWLINE.sub("\n", data.decode("utf-8", "replace"))


class Kept:
    """One stream's bytes, at most ``cap`` of them: the first half as they came, then the
    latest half (older ones dropped as new ones come). Thread-safe: a reader thread adds,
    the caller reads the text when it wants (a process that timed out, too)."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.cut = 0
        self._lock = threading.Lock()

    def add(self, data: bytes) -> None:
        with self._lock:
            room = self.head_cap - len(self.head)
            if room > 0:
                self.head += data[:room]
                data = data[room:]
            if not data:
                return
            self.tail.append(data)
            self.tail_size += len(data)
            while self.tail_size > self.tail_cap:
                over = self.tail_size - self.tail_cap
                first = self.tail[0]
                if len(first) <= over:
                    self.tail.popleft()
                    dropped = len(first)
                else:
                    self.tail[0] = first[over:]
                    dropped = over
                self.tail_size -= dropped
                self.cut += dropped

    def text(self) -> str:
        with self._lock:
            head, tail, cut = bytes(self.head), b"".join(self.tail), self.cut
        if not cut:
            return as_text(head + tail)
        return f"{as_text(head)}\n{cut_note(cut)}\n{as_text(tail)}"

    def drain(self, stream: IO[bytes]) -> None:
        """Read ``stream`` to its end, keeping what fits."""
        for data in iter(lambda: stream.read1(CHUNK), b""):  # type: ignore[attr-defined]
            self.add(data)


def read_lines(stream: IO[bytes], kept: Kept, each: Callable[[list[str]], None]) -> None:
    """Read ``stream`` to its end: every byte to ``kept``, its lines (without their ends) to
    ``each`` as they come, those of each read together; of a line over ``LINE_CAP``, its
    start and how much was cut."""
    start, cut = b"", 0  # the line read so far (at most LINE_CAP), and what was cut of it
    for data in iter(lambda: stream.read1(CHUNK), b""):  # type: ignore[attr-defined]
        kept.add(data)
        *ended, rest = data.split(b"\n")
        lines: list[str] = []
        for part in ended:
            lines += _line(start, part, cut)
            start, cut = b"", 0
        room = LINE_CAP - len(start)
        start, cut = start + rest[:room], cut + max(len(rest) - room, 0)
        if lines:
            each(lines)
    if start or cut:
        each(_line(start, b"", cut))


def _line(start: bytes, part: bytes, cut: int) -> list[str]:
    """One line read up to its end, as text mode reads it (a ``\r`` alone ends a line too)."""
    room = LINE_CAP - len(start)
    cut += max(len(part) - room, 0)
    lines = _NEWLINE.split((start + part[:room]).decode("utf-8", "replace"))
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # a "\r" just before its "\n"
    if cut:
        lines[-1] += f" {cut_note(cut)}"
    return lines
