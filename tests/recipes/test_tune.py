"""halo tune's core (halo_cluster.recipes.tune) through scripted nodes: each engine's
one-node layout first, recording the token reference the others are compared with; a layout
refused before it starts is a row with its cause; the winner by each objective; the
engine's own error read from the recorded logs of vLLM's CPU build refusing PP=2; the
planner's predictions for the lab's tiny model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from halo_cluster.capacity.catalog import find_hardware
from halo_cluster.config import ServeConfig
from halo_cluster.engines import llama_cpp_layouts, vllm_layouts
from halo_cluster.engines.layout import Layout
from halo_cluster.recipes import tune
from halo_cluster.recipes.predict import ModelFiles, Predictions, predict
from halo_cluster.witness.engine_log import raised
from tests.cluster.test_serve import VLLM, Node, cluster, vllm_table

SERVE = ServeConfig(model="/m", sections=vllm_table())
FILES = ModelFiles("tiny", served={"vllm": "/m"})
MEASURED = {"1": tune.LevelRate(50.0, 20.0, 30.0, 0)}
MEASURED_JSON = {
    "1": {
        "tokens_per_s": 50.0,
        "tpot_ms_p50": 20.0,
        "ttft_ms_p50": 30.0,
        "errors": 0,
        "energy": None,
    }
}


def nodes() -> dict[str, Node]:
    logs = [(VLLM / f"mp-tp2-node{i}.log").read_text() for i in (1, 2)]
    return {"node1": Node(logs[0], (24_000, 40, None)), "node2": Node(logs[1], (24_000, 9, None))}


def test_each_layout_served_proven_and_measured_in_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    srv = cluster(tmp_path, nodes(), SERVE)
    predictions = Predictions("tcp", "lab", {"vllm TP2": {"1": 40.0}}, [])
    tuner = tune.Tuner(srv.cluster, FILES, predictions, tune.Workload((1,)), lambda _m: None)
    monkeypatch.setattr(tuner, "_bench", lambda: MEASURED)
    layouts = tune.ordered([vllm_layouts.layout(2, 2, 1), vllm_layouts.layout(3, 1, 3)])
    assert [x.name for x in layouts] == ["vllm TP1", "vllm TP2", "vllm PP3"]
    found: list[tune.TuneRow] = []
    tuner.run(layouts, found)
    rows = [row.to_dict() for row in found]
    for row in rows:
        row.pop("seconds")
    assert rows == [
        {
            "layout": vllm_layouts.layout(1, 1, 1).to_dict(),
            "predicted_tokens_per_s": None,
            "measured": MEASURED_JSON,
            "proven": "one node",
            "tokens": {"recorded": "vllm tp1 on node1"},
            "error": None,
            "ready_s": rows[0]["ready_s"],
        },
        {
            "layout": vllm_layouts.layout(2, 2, 1).to_dict(),
            "predicted_tokens_per_s": {"1": 40.0},
            "measured": MEASURED_JSON,
            "proven": "socket",
            "tokens": {"ok": True, "agreement": 1.0, "drift_nats": 0.0},
            "error": None,
            "ready_s": rows[1]["ready_s"],
        },
        {
            "layout": vllm_layouts.layout(3, 1, 3).to_dict(),
            "predicted_tokens_per_s": None,
            "measured": None,
            "proven": None,
            "tokens": None,
            "error": "--nodes 3: the cluster has 2 node(s) (node1, node2)",
        },
    ]
    assert not any(n.running for n in srv.cluster.clients.values() if hasattr(n, "running"))
    doc = tune.document("lab", "tiny", "latency", tune.Workload((1,)), predictions, found, False)
    assert doc.winner() == {
        "layout": "vllm TP1",
        "reason": "vllm TP1: 50 tok/s at concurrency 1 (latency); next vllm TP2 at 50",
    }
    body = doc.to_dict()
    assert body["schema"] == "halo.tune/1" and "incomplete" not in body
    assert body["rows"] == [row.to_dict() for row in found]


def _row(layout: Layout, rates: dict[str, float], **more: Any) -> tune.TuneRow:
    measured = {c: tune.LevelRate(r, None, None, 0) for c, r in rates.items()}
    return tune.TuneRow(layout, measured=measured, **more)


def test_the_winner_by_each_objective() -> None:
    single = llama_cpp_layouts.layout(1)
    rows = [
        _row(single, {"1": 600.0, "4": 1200.0}),
        _row(vllm_layouts.layout(1, 1, 1), {"1": 180.0, "4": 1500.0}),
        _row(vllm_layouts.layout(2, 2, 1), {"1": 900.0, "4": 2000.0}, tokens={"ok": False}),
        tune.TuneRow(vllm_layouts.layout(2, 1, 2), error="HTTP Error 500"),
    ]
    assert tune.winner(rows, "latency", (1, 4)) == (
        rows[0],
        "llama.cpp single: 600 tok/s at concurrency 1 (latency); next vllm TP1 at 180",
    )
    assert tune.winner(rows, "throughput", (1, 4))[0] is rows[1]
    assert tune.winner(rows[2:], "latency", (1,)) == (
        None,
        "no layout came up and measured cleanly",
    )


def test_the_engines_own_error_from_its_logs() -> None:
    """vLLM's CPU build refusing PP=2 at the first request (recorded in the lab): the worker
    raised the cause; the head only a consequence."""
    worker = (VLLM / "mp-pp2-cpu-node2.log").read_text().splitlines()
    head = (VLLM / "mp-pp2-cpu-node1.log").read_text().splitlines()
    assert raised(worker) == "AssertionError: assert self.intermediate_tensors is not None"
    assert raised(head) == "KeyError: 'cmpl-9f0545bc57342f78-0-8af2a094'"
    assert raised(["INFO all is well"]) is None
    assert raised(["(EngineCore pid=1) ERROR 12-02 18:08:22 [core.py:1] EngineDeadError: x"]) == (
        "EngineDeadError: x"
    )


def test_predictions_for_the_lab_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From the model's own files: config.json for vLLM, the GGUF for llama.cpp; a profile
    that was never measured is a note, not a number."""
    from halo_cluster.lab.tiny_model import write_model
    from halo_cluster.lab.tiny_spec import TinyModelSpec

    model = tmp_path / "m"
    srv = cluster(tmp_path, nodes(), SERVE)
    write_model(model, TinyModelSpec(4, 256, 8, 4, 4096, 0).validate(), force=False)
    files = ModelFiles("m", model, None, {"vllm": "m"})
    layouts = [vllm_layouts.layout(1, 1, 1), vllm_layouts.layout(2, 2, 1)]
    found = predict(srv.config, files, layouts, [1, 4], tmp_path)
    assert (found.link, found.hardware, found.notes) == ("tcp", "strix-halo-128", [])
    assert set(found.by_layout) == {"vllm TP1", "vllm TP2"}
    assert found.by_layout["vllm TP1"]["4"] > found.by_layout["vllm TP1"]["1"] > 0
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "nothing"))
    lab = replace(srv.config, hardware="lab")
    missing = predict(lab, files, layouts, [1], tmp_path)
    assert missing.by_layout == {}
    assert missing.notes == [
        "no prediction for vllm: no lab profile measured on this machine: run 'halo lab "
        "profile' first"
    ]
    assert find_hardware("strix-halo-128").id == "strix-halo-128"
    json.dumps(found.to_dict())


def test_ctrl_c_keeps_the_rows_measured_so_far(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second layout is interrupted: the first row is saved, marked incomplete, exit 130."""
    from click.testing import CliRunner

    from halo_cluster.cli import cluster as cli_cluster
    from halo_cluster.cli.recipes import tune as tune_command
    from halo_cluster.recipes import predict as predicting

    srv = cluster(tmp_path, nodes(), SERVE)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr(cli_cluster, "cluster_handle", lambda *_a: srv.cluster)
    monkeypatch.setattr(tune, "model_files", lambda *_a: FILES)
    monkeypatch.setattr(
        predicting, "predict", lambda *_a: Predictions("tcp", "lab", {}, ["no profile"])
    )

    def measure(self: tune.Tuner, layout: Layout) -> tune.TuneRow:
        if layout.nodes > 1:
            raise KeyboardInterrupt
        return tune.TuneRow(layout, measured=MEASURED)

    monkeypatch.setattr(tune.Tuner, "measure", measure)
    out = tmp_path / "tune.json"
    done = CliRunner().invoke(tune_command, ["/m", "--layouts", "vllm TP2", "--out", str(out)])
    assert done.exit_code == 130, done.output
    saved = json.loads(out.read_text())
    assert (saved["incomplete"], [r["layout"]["name"] for r in saved["rows"]]) == (
        "interrupted after 1 layout(s)",
        ["vllm TP1"],
    )
    assert saved["winner"]["layout"] == "vllm TP1"


def test_a_tune_result_is_read_back_listed_and_reported(tmp_path: Path) -> None:
    """Saved as halo.tune/1, it is a result like the others: validated, listed with its
    winner, and shown in halo report as predicted beside measured per layout."""
    from halo_cluster.bench.results import listing, load, save
    from halo_cluster.report import render

    rows = [
        _row(vllm_layouts.layout(1, 1, 1), {"1": 181.1}, predicted_tokens_per_s={"1": 501.6}),
        tune.TuneRow(vllm_layouts.layout(2, 1, 2), error="HTTP 500"),
    ]
    predictions = Predictions("lab", "lab", {}, [])
    tuned = tune.document("lab", "tiny", "latency", tune.Workload((1,)), predictions, rows, False)
    doc = tuned.to_dict()
    path = save(doc, None, tmp_path, "tune")
    assert load(path)["winner"]["layout"] == "vllm TP1"
    (listed,) = listing(tmp_path)
    assert (listed["kind"], listed["summary"]) == (
        "tune",
        "tiny: 2 layouts (1 failed), winner vllm TP1 (latency)",
    )
    page = render([{**load(path), "label": path.stem}])
    assert 'data-chart="tune-' in page and "predicted c1" in page and "HTTP 500" in page
    broken = {**doc, "rows": [{"layout": "vllm TP1"}]}
    path.write_text(json.dumps(broken))
    with pytest.raises(Exception, match=r"rows\[0\]\.layout is 'vllm TP1', not an object"):
        load(path)
