"""The field table is data: every row names its source, and the capacity planner meets the accuracy
targets on it; the benchmark prints it side by side, and its committed results are current."""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path
from types import ModuleType

import pytest

from halo_cluster.capacity import catalog, field
from halo_cluster.capacity.quants import find_quant

BENCH = Path(__file__).parents[2] / "benchmarks" / "bench_plan_field.py"
RESULTS = BENCH.parent / "results" / "plan_field.json"
ROWS = field.rows()


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_plan_field", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_rows_are_sourced_data(row: field.FieldRow) -> None:
    assert row.source and row.role in ("calibration", "holdout") and row.published > 0
    assert row.engine in ("vllm", "llama.cpp") and find_quant(row.quant).name == row.quant
    assert (row.link is None) == (row.nodes == 1)
    field.request(row)  # the model and link resolve


def test_ids_are_unique_and_both_engines_have_calibration_and_holdout_rows() -> None:
    assert len({r.id for r in ROWS}) == len(ROWS)
    for engine in ("vllm", "llama.cpp"):
        assert {r.role for r in ROWS if r.engine == engine} == {"calibration", "holdout"}


def test_the_issues_three_measurements_are_in_the_table() -> None:
    published = {(r.model, r.engine, r.nodes, r.link, r.published) for r in ROWS}
    assert ("gpt-oss-120b", "llama.cpp", 1, None, 56.6) in published
    assert ("llama-3.3-70b", "vllm", 2, "roce", 1.8) in published
    assert ("qwen3-next-80b-a3b", "llama.cpp", 2, "tcp-25gbe", 30.19) in published
    assert ("qwen3-next-80b-a3b", "llama.cpp", 2, "rdma-25gbe", 32.16) in published


@pytest.mark.parametrize("role", ["calibration", "holdout"])
def test_accuracy_targets(role: str) -> None:
    errors = [abs(field.predict(r)["error"]) for r in ROWS if r.role == role]
    assert statistics.median(errors) <= 0.15 and max(errors) <= 0.30


def test_benchmark_prints_every_row_side_by_side() -> None:
    rows = [field.predict(r) for r in ROWS]
    text = bench().table(rows)
    for row in rows:
        line = next(line for line in text.splitlines() if f" {row['id']} " in line)
        assert f"{row['published']:.2f}" in line and f"{row['predicted']:.2f}" in line


def test_committed_results_are_current() -> None:
    committed = json.loads(RESULTS.read_text(encoding="utf-8"))
    assert committed["rows"] == [field.predict(r) for r in ROWS]
    assert committed["stale_engine_data"] == []
    assert all(s["meets_target"] for s in committed["summary"].values())


def test_field_configs_are_not_in_the_catalog() -> None:
    configs = catalog.capacity_data("field.json")["configs"]
    assert not set(configs) & set(catalog.models())
