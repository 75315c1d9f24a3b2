"""FakeRunner: answers from a table, for tests (and for the lifecycle logic tested without
machines). It records every argv and stdin it was given."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from halo_cluster.nodecode import as_halo
from halo_cluster.runner.result import NOT_FOUND, Call, Result, Runner

Answer = Result | Callable[[tuple[str, ...]], Result]
# an answer that reads what was sent on stdin too (a script for ``bash -s``)
InputAnswer = Callable[[tuple[str, ...], str], Result]


@dataclass(frozen=True)
class _ReadsInput:
    answer: InputAnswer


@dataclass
class FakeRunner(Runner):
    """Answers by the first matching rule: (argv prefix, Result or function of argv)."""

    rules: list[tuple[tuple[str, ...], Answer | _ReadsInput]] = field(default_factory=list)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    stdins: list[str | None] = field(default_factory=list)

    def on(self, prefix: Sequence[str], answer: Answer) -> FakeRunner:
        self.rules.append((tuple(prefix), answer))
        return self

    def on_input(self, prefix: Sequence[str], answer: InputAnswer) -> FakeRunner:
        """A rule whose answer is a function of the argv and of what came on stdin."""
        self.rules.append((tuple(prefix), _ReadsInput(answer)))
        return self

    def execute(self, call: Call) -> Result:
        args, stdin, on_line = call.argv, call.stdin, call.on_line
        self.calls.append(args)
        self.stdins.append(stdin)
        wanted = as_halo(args)  # halo's node code matches the rules for "halo CMD…"
        for prefix, answer in self.rules:
            if wanted[: len(prefix)] == prefix:
                if isinstance(answer, _ReadsInput):
                    result = answer.answer(args, stdin or "")
                else:
                    result = answer(args) if callable(answer) else answer
                if on_line is not None:
                    for line in result.stdout.splitlines():
                        on_line(line)
                return result
        return Result(args, NOT_FOUND, "", f"{args[0]}: command not found")
