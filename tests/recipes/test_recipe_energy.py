"""Energy per output token in halo tune's rows, halo run's result and halo report: a layout
measured on nodes with sources has its joules per token (in the result, the table and the
report, with the watts over the window), one whose nodes have none says so and gives no
number; saved results with energy are read back by the schema, a malformed one refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from halo_cluster.bench.energy import LevelEnergy
from halo_cluster.bench.results import load, save, stamp
from halo_cluster.cli.recipes import _energy_lines, _render_run
from halo_cluster.engines import vllm_layouts
from halo_cluster.facts.energy import ClusterEnergy, NodeEnergy
from halo_cluster.recipes import tune
from halo_cluster.recipes.predict import Predictions
from halo_cluster.recipes.run import RunResult
from halo_cluster.report import render
from halo_cluster.report.energy import per_token

HONEST = "energy: no node has a power source (nothing measured)"


def measured_energy(tokens: int = 100) -> LevelEnergy:
    nodes = (
        NodeEnergy("node1", 10.0, 40.0, "energy counter", ("intel-rapl:2/energy_uj",)),
        NodeEnergy("node2", 10.0, 10.0, "power samples", ("hwmon3/power1_average",)),
        NodeEnergy("node3", 10.0, problem="no power source"),
    )
    watts = {"node1": ((5.0, 4.0),), "node2": ((0.0, 1.0), (10.0, 1.0))}
    return LevelEnergy(ClusterEnergy(nodes, tokens), watts)


def no_source(tokens: int = 100) -> LevelEnergy:
    nodes = tuple(NodeEnergy(n, 10.0, problem="no power source") for n in ("node1", "node2"))
    return LevelEnergy(ClusterEnergy(nodes, tokens))


def tuned(rows: list[tune.TuneRow]) -> tune.Tuned:
    predictions = Predictions("lab", "lab", {}, [])
    return tune.document("lab", "tiny", "latency", tune.Workload((1,)), predictions, rows, False)


def test_a_tune_with_energy_and_one_without_is_saved_read_and_reported(tmp_path: Path) -> None:
    rows = [
        tune.TuneRow(
            vllm_layouts.layout(1, 1, 1),
            measured={"1": tune.LevelRate(100.0, 9.0, 20.0, 0, measured_energy())},
        ),
        tune.TuneRow(
            vllm_layouts.layout(2, 2, 1),
            measured={"1": tune.LevelRate(80.0, 11.0, 25.0, 0, no_source())},
        ),
    ]
    doc = tuned(rows)
    body = doc.to_dict()
    first = body["rows"][0]["measured"]["1"]["energy"]
    assert (first["joules_per_token"], first["coverage"]) == (0.5, "2 of 3 nodes measured")
    assert [n["method"] for n in first["nodes"]] == ["energy counter", "power samples", None]
    assert body["rows"][1]["measured"]["1"]["energy"]["joules_per_token"] is None
    assert _energy_lines(doc, ["1"]) == [
        "vllm TP1 c1: energy: 50.0 J over the window, 0.500 J per output token "
        "(2 of 3 nodes measured)",
        f"vllm TP2 c1: {HONEST}",
    ]
    path = save({**body, **stamp(body, None)}, None, tmp_path, "tune")
    page = render([{**load(path), "label": "t"}])
    assert "<h2>Energy per output token</h2>" in page
    assert "<td>vllm TP1 c1</td><td>0.5</td>" in page
    assert "<td>vllm TP2 c1</td><td>no power source</td>" in page
    assert page.count('data-chart="watts-') == 1  # where the nodes were sampled


def test_a_tune_where_no_node_has_a_source_says_it_once() -> None:
    rows = [
        tune.TuneRow(layout, measured={"1": tune.LevelRate(10.0, 1.0, 1.0, 0, no_source())})
        for layout in (vllm_layouts.layout(1, 1, 1), vllm_layouts.layout(2, 2, 1))
    ]
    assert _energy_lines(tuned(rows), ["1"]) == [HONEST]
    assert _energy_lines(tuned([tune.TuneRow(vllm_layouts.layout(1, 1, 1))]), ["1"]) == []


def test_a_runs_energy_in_its_result_its_json_and_its_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = RunResult("tiny", "vllm TP2", "asked", url="http://127.0.0.1:8000")
    out.measured_tokens_per_s, out.energy = 42.0, no_source(32)
    result = out.to_result("lab")
    assert result["energy"]["coverage"] == "0 of 2 nodes measured"
    assert result["energy"]["joules_per_token"] is None
    assert json.loads(json.dumps(out.to_json()))["energy"] == result["energy"]
    _render_run(out)
    assert HONEST in capsys.readouterr().out
    path = save({**result, **stamp(result, None)}, None, tmp_path, "run")
    page = render([{**load(path), "label": "r"}])
    assert "<td>vllm TP2 c1</td><td>no power source</td>" in page
    assert 'data-chart="watts-' not in page  # nothing sampled: no plot
    out.energy = measured_energy(100)
    _render_run(out)
    assert "0.500 J per output token (2 of 3 nodes measured)" in capsys.readouterr().out


def test_a_serve_result_says_per_level_what_was_measured(tmp_path: Path) -> None:
    levels = [
        {"concurrency": 1, "requests": 1, "errors": 0, "energy": measured_energy().to_dict()},
        {"concurrency": 4, "requests": 1, "errors": 0, "energy": None},  # --url alone
    ]
    body = {"schema": "halo.bench.serve/1", "kind": "serve", "levels": levels}
    path = save({**body, **stamp(body, None)}, None, tmp_path, "serve")
    page = render([{**load(path), "label": "s"}])
    assert "<td>concurrency 1</td><td>0.5</td>" in page
    assert "<td>concurrency 4</td><td>not measured (no nodes known)</td>" in page


def test_a_node_that_did_not_answer_is_named_not_counted() -> None:
    energy = LevelEnergy(
        ClusterEnergy((NodeEnergy("node1", 3.0, problem="no answer: node1: power failed"),), 5)
    ).to_dict()
    assert per_token(energy) == "not measured: node1: no answer: node1: power failed"  # type: ignore[arg-type]


def test_a_malformed_energy_is_refused_in_one_line(tmp_path: Path) -> None:
    energy = {**measured_energy().to_dict(), "joules": "lots"}
    body = {"schema": "halo.bench.serve/1", "kind": "serve", "levels": [{"energy": energy}]}
    path = tmp_path / "serve.json"
    path.write_text(json.dumps(body))
    with pytest.raises(Exception, match=r"levels\[0\]\.energy\.joules is 'lots', not a number"):
        load(path)
    nodes = {**energy, "joules": 1.0, "nodes": [{"node": "n", "method": "guessed"}]}
    path.write_text(json.dumps({**body, "levels": [{"energy": nodes}]}))
    with pytest.raises(Exception, match=r"energy\.nodes\[0\]\.method is 'guessed'"):
        load(path)
