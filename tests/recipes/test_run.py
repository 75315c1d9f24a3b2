"""halo run's core (halo_cluster.recipes.run) through scripted nodes: the layout asked for,
the latest tune's winner, else the planner's fastest; the one-node reference recorded
before a multi-node layout; a second run with nothing changed only checks the server; a
layout whose tokens differ is stopped."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from halo_cluster.bench.results import listing, load, save, stamp, summary
from halo_cluster.config import ServeConfig
from halo_cluster.engines import llama_cpp_layouts, vllm_layouts
from halo_cluster.lab.tiny_model import write_model
from halo_cluster.lab.tiny_spec import TinyModelSpec
from halo_cluster.recipes import run as running
from halo_cluster.recipes import tune
from halo_cluster.recipes.predict import ModelFiles
from halo_cluster.report import render
from halo_cluster.supervision import SuperviseSettings
from tests.cluster.test_serve import ANSWER, VLLM, Node, cluster, vllm_table

# the supervisor is tested in the lab (tests/cluster/test_supervise_lab.py)
SERVE = ServeConfig(sections=vllm_table(), supervise=SuperviseSettings(enabled=False))
MEASURED = {"1": tune.LevelRate(42.0, 20.0, 30.0, 0)}


def nodes() -> dict[str, Node]:
    logs = [(VLLM / f"mp-tp2-node{i}.log").read_text() for i in (1, 2)]
    return {"node1": Node(logs[0], (24_000, 40, None)), "node2": Node(logs[1], (24_000, 9, None))}


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "tiny"
    write_model(path, TinyModelSpec(4, 256, 8, 4, 4096, 0).validate(), force=False)
    return path


def files(model: Path) -> ModelFiles:
    return ModelFiles("tiny", model, None, {"vllm": "/var/lib/halo/models/tiny"})


def test_the_layout_asked_for_then_a_tunes_winner_then_the_planner(
    tmp_path: Path, model: Path
) -> None:
    srv = cluster(tmp_path, nodes(), SERVE)
    results = tmp_path / "results"
    found = running.choose(srv.cluster, files(model), "vllm TP2", None, results)
    assert found[:2] == (vllm_layouts.layout(2, 2, 1), "the layout asked for (--layout)")
    planner = running.choose(srv.cluster, files(model), None, None, results)
    assert planner[1].startswith("the planner's fastest at concurrency 1: ")
    assert planner[1].endswith(" tok/s predicted (strix-halo-128, link tcp)")
    results.mkdir()
    doc = {"cluster": "lab", "model": "tiny", "winner": {"layout": "vllm TP2"}}
    (results / "tune-20261202T000000.json").write_text(json.dumps(doc))
    (results / "tune-20261202T000001.json").write_text(json.dumps({**doc, "model": "other"}))
    other = {**doc, "cluster": "elsewhere", "winner": {"layout": "vllm TP1"}}
    (results / "tune-20261202T000002.json").write_text(json.dumps(other))
    tuned = running.choose(srv.cluster, files(model), None, None, results)
    assert tuned[:2] == (
        vllm_layouts.layout(2, 2, 1),
        "the winner of halo tune (tune-20261202T000000.json)",
    )


def _patched(monkeypatch: pytest.MonkeyPatch, model: Path) -> None:
    located = tune.LocatedModel(files(model), None)  # nothing to copy
    monkeypatch.setattr(running, "locate_model", lambda *_a, **_k: located)
    monkeypatch.setattr(running, "short_bench", lambda *_a: MEASURED)


def test_a_run_records_the_reference_serves_proves_and_measures(
    tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _patched(monkeypatch, model)
    scripted = nodes()
    srv = cluster(tmp_path, scripted, SERVE)
    out = running.run(srv.cluster, str(model), "vllm TP2", None, tmp_path, lambda _m: None, 5)
    assert (out.layout, out.stopped, out.already_running) == ("vllm TP2", False, False)
    assert out.serve["proven"] == "socket" and out.serve["tokens"]["ok"] is True
    assert out.serve["tokens"]["reference"] == "vllm tp1 on node1"  # recorded first
    assert out.measured_tokens_per_s == 42.0 and out.url == "http://127.0.0.1:8000"
    starts = [s for s in scripted["node1"].scripts if "setsid" in s]
    assert len(starts) == 2  # the one-node reference, then the layout
    # one walk: the nodes' facts gathered once, a stop round only where a server may run
    # (before the reference, which may find one; after it), none before the layout
    gathered = [s for s in scripted["node2"].scripts if "inventory" in s]
    stops = [s for s in scripted["node2"].scripts if "kill -TERM" in s]
    assert (len(gathered), len(stops)) == (1, 2)
    result = out.to_result("lab")
    assert result["schema"] == "halo.run/1" and result["proven"] == "socket"
    saved = save({**result, **stamp(result, None)}, None, tmp_path / "results", "run")
    listed = listing(tmp_path / "results")
    assert [(r["kind"], r["path"]) for r in listed] == [("run", str(saved))]
    assert "vllm TP2, 42.0 tok/s measured" in summary(load(saved))
    page = render([{**load(saved), "label": saved.stem}])
    assert "Runs: the layout served, predicted and measured" in page and 'data-chart="run"' in page
    # again, nothing changed: only the server is asked
    for node in scripted.values():
        node.scripts.clear()
    again = running.run(srv.cluster, str(model), "vllm TP2", None, tmp_path, lambda _m: None, 5)
    assert (again.already_running, again.url) == (True, "http://127.0.0.1:8000")
    assert not any("setsid" in s for n in scripted.values() for s in n.scripts)


def test_a_layout_whose_tokens_differ_is_stopped(
    tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _patched(monkeypatch, model)
    scripted = nodes()
    srv = cluster(tmp_path, scripted, SERVE)
    running.run(srv.cluster, str(model), "vllm TP1", None, tmp_path, lambda _m: None, 5)
    moved: dict[str, Any] = copy.deepcopy(ANSWER)
    moved["steps"][0]["logprob"] = -1.0
    scripted["node1"].answer = moved
    out = running.run(srv.cluster, str(model), "vllm TP2", None, tmp_path, lambda _m: None, 5)
    assert out.stopped and out.measured_tokens_per_s is None
    assert "prompt 1 differs from the one-node reference" in out.serve["problems"][0]
    assert not scripted["node1"].running and not scripted["node2"].running


def test_a_model_of_the_stores_is_served_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name 'halo model ls' shows: nothing to copy, nothing here for the planner to read."""
    from halo_cluster.models import stores as models
    from halo_cluster.recipes import tune

    srv = cluster(tmp_path, nodes(), SERVE)
    found = models.Resolved("tiny", "/var/lib/halo/models/tiny/m.gguf", "d" * 64, "/src")
    monkeypatch.setattr(models, "resolve", lambda *_a: found)
    stored = tune.model_files(srv.cluster, "tiny", lambda _m: None)
    assert stored == ModelFiles(
        "tiny", served={"llama.cpp": "tiny"}, opened={"llama.cpp": found.path}
    )
    assert stored.served_path("llama.cpp", "/var/lib/halo/models") == found.path
    layout, reason, predicted = running.choose(srv.cluster, stored, None, None, tmp_path)
    assert (layout, predicted) == (llama_cpp_layouts.layout(1), None)
    assert reason == (
        "llama.cpp single, one node (no prediction: no prediction for llama.cpp: the model's "
        "files are not on this machine)"
    )
    monkeypatch.setattr(models, "resolve", lambda *_a: None)
    with pytest.raises(Exception, match="no model of that name in the stores"):
        tune.model_files(srv.cluster, "tiny", lambda _m: None)


def test_a_hugging_face_id_comes_from_the_local_cache(
    tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """org/name: the cache's snapshot is read here (for the planner) and copied to every
    store under the manifest's name, as 'halo model sync org/name' would."""
    from types import SimpleNamespace

    from halo_cluster.models import source as model_source
    from halo_cluster.models import sync as model_sync
    from halo_cluster.recipes import tune

    srv = cluster(tmp_path, nodes(), SERVE)
    source = SimpleNamespace(path=str(model), manifest=SimpleNamespace(name="org--tiny"))
    asked: list[str] = []
    monkeypatch.setattr(
        model_source, "resolve_source", lambda _c, text, _n: asked.append(text) or source
    )
    synced: list[list[str]] = []

    class Synced:
        def __init__(self, _cluster: Any, found: Any, targets: list[str]) -> None:
            assert found is source
            synced.append(targets)

        def run(self) -> Any:
            return SimpleNamespace(ok=True, nodes={})

    monkeypatch.setattr(model_sync, "Sync", Synced)
    found = tune.model_files(srv.cluster, "org/tiny", lambda _m: None)
    assert found == ModelFiles("org--tiny", model, None, {"vllm": "org--tiny"})
    assert (asked, synced) == (["org/tiny"], [["node1", "node2"]])
