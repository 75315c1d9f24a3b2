"""halo bench collective and tp around their ranked run (a stand-in for bench/run.ranked_run):
the spec and time limit each passes, the result shown or printed as JSON with where it was
saved, and a run that ended early as one line and its exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from halo_cluster.bench import run
from halo_cluster.bench.cluster import BenchCluster
from halo_cluster.config import Config, NodeConfig
from halo_cluster.errors import BenchError
from tests.bench.test_results import collective_result, tp_result
from tests.conftest import halo_here


class Ranked:
    """ranked_run's stand-in: what it was asked, and one answer."""

    def __init__(self, result: dict[str, Any] | None, failure: BaseException | None) -> None:
        self.answer = (result, "/r/saved.json", failure)
        self.asked: list[tuple[dict[str, object], float, str]] = []

    def __call__(
        self,
        config_path: str | None,
        spec: dict[str, object],
        limit_s: float,
        kind: str,
        out: str | None,
        progress: object,
    ) -> tuple[dict[str, Any] | None, str, BaseException | None, BenchCluster]:
        self.asked.append((spec, limit_s, kind))
        nodes = (NodeConfig("node1", "root@10.0.0.1", "10.1.0.1"),)
        config = Config(Path("halo.toml"), "lab", "auto", nodes)
        return (*self.answer, BenchCluster(config, {}, [], {}))


halo = halo_here  # the CLI in this process (tests.conftest)


@pytest.fixture
def ranked(monkeypatch: pytest.MonkeyPatch) -> Ranked:
    stand_in = Ranked(collective_result(), None)
    monkeypatch.setattr(run, "ranked_run", stand_in)
    return stand_in


def test_collective_passes_its_spec_and_limit(
    ranked: Ranked, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("bench", "collective", "--sizes", "1KiB:4KiB", "--timeout", "10", "--json")
    code, out, err = halo(capsys, *args)
    assert (code, err) == (0, "")
    assert json.loads(out) == {**collective_result(), "saved": "/r/saved.json"}
    spec, limit_s, kind = ranked.asked[0]
    assert (spec["sizes"], spec["timeout"], limit_s, kind) == (
        [1024, 2048, 4096],
        10.0,
        10.0 * (3 + 4) + 60,
        "collective",
    )


def test_tp_shows_its_table_and_where_it_was_saved(
    ranked: Ranked, capsys: pytest.CaptureFixture[str]
) -> None:
    ranked.answer = (tp_result(), "/r/saved.json", None)
    code, out, err = halo(capsys, "bench", "tp", "llama-3.1-8b", "--batch", "1,8")
    assert (code, err) == (0, "")
    assert "decode-step network replay" in out and out.endswith("saved /r/saved.json\n")
    spec, limit_s, kind = ranked.asked[0]
    assert (spec["batches"], limit_s, kind) == ([1, 8], 60.0 * (2 + 4) + 60, "tp")


@pytest.mark.parametrize(
    ("failure", "code", "line"),
    [
        (
            BenchError("node2 stopped answering"),
            1,
            "halo: error: node2 stopped answering; partial result kept in /r/saved.json\n",
        ),
        (
            KeyboardInterrupt(),
            130,
            "halo: interrupted; remote tools stopped; partial result kept in /r/saved.json\n",
        ),
    ],
)
@pytest.mark.parametrize("command", [["collective"], ["tp", "llama-3.1-8b"]])
def test_a_run_that_ended_early_is_one_line(
    ranked: Ranked,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    failure: BaseException,
    code: int,
    line: str,
) -> None:
    ranked.answer = (None, "/r/saved.json", failure)
    assert halo(capsys, "bench", *command) == (code, "", line)
