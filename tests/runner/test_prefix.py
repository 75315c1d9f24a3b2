"""PrefixRunner: the node's exec_prefix before every argv, everything else passed as given."""

from __future__ import annotations

from collections.abc import Sequence

from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.prefix import PrefixRunner
from halo_cluster.runner.result import LineSink, Result


class Recorder:
    """A Runner that records each call's four arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], str | None, float, LineSink | None]] = []

    def run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        timeout: float = 30.0,
        on_line: LineSink | None = None,
    ) -> Result:
        self.calls.append((tuple(argv), stdin, timeout, on_line))
        return Result(tuple(argv), 0, "out\n", "")


def test_the_prefix_comes_first_and_the_rest_is_passed_on() -> None:
    inner = Recorder()
    prefixed = PrefixRunner(inner, ("toolbox", "run", "-c", "vllm", "--"))
    seen: list[str] = []
    result = prefixed.run(["bash", "-s"], "echo 'a b'\n", 12.5, seen.append)
    assert inner.calls == [
        (("toolbox", "run", "-c", "vllm", "--", "bash", "-s"), "echo 'a b'\n", 12.5, seen.append)
    ]
    assert result.stdout == "out\n"


def test_words_stay_words_and_an_empty_prefix_changes_nothing() -> None:
    inner = Recorder()
    PrefixRunner(inner, ("env", "PATH=/e/bin:/usr/bin")).run(["printf", "%s", "a b; $(x)"])
    PrefixRunner(inner).run(["true"], timeout=3)
    assert [call[:3] for call in inner.calls] == [
        (("env", "PATH=/e/bin:/usr/bin", "printf", "%s", "a b; $(x)"), None, 30.0),
        (("true",), None, 3),
    ]


def test_defaults_and_lines_reach_the_inner_runner() -> None:
    fake = FakeRunner().on(["env", "X=1", "tool"], Result((), 0, "a\nb\n", ""))
    lines: list[str] = []
    assert PrefixRunner(fake, ("env", "X=1")).run(["tool"], on_line=lines.append).ok
    assert lines == ["a", "b"] and fake.calls == [("env", "X=1", "tool")]
