"""The tokens of one OpenAI answer, counted as its bytes go past the key gate (gate.py), for
the usage it keeps per key. Pure: bytes in, counts out.

- A JSON answer (``application/json``): its ``"usage"`` object, when the answer fits in
  MAX_JSON_ANSWER_BYTES (a longer one is relayed all the same, its tokens not counted).
- An SSE stream (``text/event-stream``): the last ``"usage"`` object its events carried (an
  engine asked for ``stream_options.include_usage`` sends one at the end), else an
  approximation: one completion token per event whose ``choices`` carry text (``text``, or
  ``delta.content``), prompt tokens unknown (0). One ``data:`` line is one event, as OpenAI's
  servers send them. Only the current line is kept, and only up to MAX_LINE_BYTES (a few
  KiB; a longer line is not counted), never the whole answer.
- Anything else: no tokens.
"""

from __future__ import annotations

from typing import Any, Protocol

from halo_cluster.bounded.jsonin import loads

MAX_JSON_ANSWER_BYTES = 1 << 20
MAX_LINE_BYTES = 8 << 10
# more tokens than any one answer has: not counted (summed into the usage file, a count past
# 64 bits would make it a file the gate refuses at its next start)
MAX_TOKENS = 1 << 32


class Meter(Protocol):
    """Counts the tokens of one answer as its bytes go past."""

    def feed(self, chunk: bytes) -> None: ...

    def tokens(self) -> tuple[int, int]: ...


class NoMeter:
    """An answer that is neither JSON nor SSE: no tokens."""

    def feed(self, chunk: bytes) -> None:
        pass

    def tokens(self) -> tuple[int, int]:
        return (0, 0)


class JsonMeter:
    """A JSON answer: its ``usage`` object, when the answer fits MAX_JSON_ANSWER_BYTES."""

    def __init__(self) -> None:
        self._body = bytearray()
        self._over = False

    def feed(self, chunk: bytes) -> None:
        if not self._over and len(self._body) + len(chunk) > MAX_JSON_ANSWER_BYTES:
            self._over = True
            self._body.clear()
        if not self._over:
            self._body += chunk

    def tokens(self) -> tuple[int, int]:
        if self._over:
            return (0, 0)
        try:
            data = loads(bytes(self._body))
        except ValueError:
            return (0, 0)
        found = usage_pair(data.get("usage")) if isinstance(data, dict) else None
        return found or (0, 0)


class SseMeter:
    """An SSE stream, line by line (one ``data:`` line is one event, as OpenAI's servers send
    them): the last ``usage`` object seen, and the events whose choices carry text. Only the
    current line is kept, and only up to MAX_LINE_BYTES."""

    def __init__(self) -> None:
        self._line = bytearray()
        self._skipping = False
        self.events = 0
        self.usage: tuple[int, int] | None = None

    def feed(self, chunk: bytes) -> None:
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            self._keep(chunk[start:end])
            self._line_done()
            start = end + 1
        self._keep(chunk[start:])

    def tokens(self) -> tuple[int, int]:
        self._line_done()
        return self.usage if self.usage is not None else (0, self.events)

    def _keep(self, part: bytes) -> None:
        if self._skipping or len(self._line) + len(part) > MAX_LINE_BYTES:
            self._skipping = True
            self._line.clear()
        else:
            self._line += part

    def _line_done(self) -> None:
        line, skipped = bytes(self._line).rstrip(b"\r"), self._skipping
        self._line.clear()
        self._skipping = False
        if skipped or not line.startswith(b"data:"):
            return
        try:
            event = loads(line[5:].strip())
        except ValueError:  # "[DONE]", or not JSON
            return
        if isinstance(event, dict):
            self.usage = usage_pair(event.get("usage")) or self.usage
            self.events += carries_text(event.get("choices"))


def usage_pair(usage: Any) -> tuple[int, int] | None:
    """(prompt, completion) tokens of an OpenAI ``usage`` object, or None."""
    if not isinstance(usage, dict):
        return None
    counts = [usage.get(name, 0) for name in ("prompt_tokens", "completion_tokens")]
    if not all(
        isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_TOKENS for n in counts
    ):
        return None
    return (counts[0], counts[1])


def carries_text(choices: Any) -> bool:
    """Whether an event's ``choices`` carry generated text (``text`` or ``delta.content``)."""
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        content = delta.get("content") if isinstance(delta, dict) else None
        if choice.get("text") or content:
            return True
    return False


def meter_for(content_type: str) -> Meter:
    kind = content_type.split(";")[0].strip().lower()
    if kind == "text/event-stream":
        return SseMeter()
    if kind == "application/json" or kind.endswith("+json"):
        return JsonMeter()
    return NoMeter()
