"""FakeRunner: answers by rule, records argv and stdin, streams its answer's lines."""

from __future__ import annotations

from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.result import NOT_FOUND, Result


def test_fake_runner_streams_its_answer() -> None:
    fake = FakeRunner().on(["tool"], Result(("tool",), 0, "a\nb\n", ""))
    lines: list[str] = []
    fake.run(["tool", "x"], stdin="script", on_line=lines.append)
    assert lines == ["a", "b"] and fake.stdins == ["script"]


def test_node_code_commands_match_the_rules_for_halo() -> None:
    """Rules name node-side commands as an installed halo would run them: the node code's
    ``python -c BOOT HASH CMD…`` (behind any prefix) matches ``halo CMD…``."""
    from halo_cluster.nodecode import NodeCode

    code = NodeCode(b"zip")
    fake = FakeRunner().on(["env", "X=1", "halo", "inventory"], Result((), 0, "{}", ""))
    assert fake.run(["env", "X=1", *code.argv("python3", ["inventory", "--json"])]).stdout == "{}"
    missing = fake.run(["ping", "-c", "1"])
    assert (missing.returncode, missing.stderr) == (NOT_FOUND, "ping: command not found")
    assert len(fake.calls) == 2 and fake.stdins == [None, None]
