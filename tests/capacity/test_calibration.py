"""--calibrate: a one-node `halo bench serve` result (schema halo.bench.serve/1) becomes the
node's effective decode bandwidth for the engine."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from halo_cluster.capacity import catalog
from halo_cluster.capacity.calibration import Calibration, read_serve_result
from halo_cluster.capacity.engines import find_engine
from halo_cluster.capacity.estimate import Request, calibrated, layout_rows
from halo_cluster.errors import UsageError

STRIX = catalog.find_hardware("strix-halo-128")
ROCE = catalog.find_link("roce")


def serve_result(**changes: Any) -> dict[str, Any]:
    """What `halo bench serve --concurrency 1,4` writes (bench/serve_load.py), stamped."""
    level1 = {
        "concurrency": 1,
        "requests": 8,
        "errors": 0,
        "first_error": None,
        "ttft_ms": {"p50": 310.0, "p90": 330.0, "p99": 340.0, "mean": 315.0},
        "itl_ms": {"p50": 19.0, "p90": 21.0, "p99": 25.0, "mean": 19.5},
        "tpot_ms": {"p50": 19.2, "p90": 20.1, "p99": 21.0, "mean": 19.4},
        "e2e_ms": {"p50": 5200.0, "p90": 5300.0, "p99": 5400.0, "mean": 5210.0},
        "output_tokens": 2048,
        "output_chunks": 2048,
        "output_tokens_per_s": 49.0,
        "tokens_from": "usage",
        "input_tokens": 4096,
        "wall_s": 41.8,
    }
    result = {
        "schema": "halo.bench.serve/1",
        "kind": "serve",
        "url": "http://127.0.0.1:8000",
        "model": "openai/gpt-oss-120b",
        "input_len": 512,
        "output_len": 256,
        "levels": [level1, {**level1, "concurrency": 4, "output_tokens_per_s": 120.0}],
        "created": "2026-05-01T10:00:00+00:00",
        "plans": {"strix1": {}},
    }
    result.update(changes)
    return result


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "serve.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_reads_the_concurrency_1_level(tmp_path: Path) -> None:
    path = write(tmp_path, serve_result())
    assert read_serve_result(path) == Calibration(
        path=str(path),
        created="2026-05-01T10:00:00+00:00",
        model="openai/gpt-oss-120b",
        tokens_per_s=49.0,
        tokens_per_s_low=1000 / 21.0,  # the p90 inter-token latency
        tokens_per_s_high=1000 / 19.0,  # the p50 inter-token latency
        input_len=512,
        output_len=256,
    )


def test_calibrated_estimate_reproduces_the_measurement_on_one_node(tmp_path: Path) -> None:
    cal = read_serve_result(write(tmp_path, serve_result()))
    m = catalog.find_model("gpt-oss-120b")
    req = Request(
        m, STRIX, ROCE, nodes=1, quant="MXFP4", context=cal.context,
        engine=find_engine("llama.cpp"), calibration=cal,
    )  # fmt: skip
    (row,) = layout_rows(req)
    assert row.tokens_per_s == pytest.approx(49.0)
    assert row.tokens_per_s_low == pytest.approx(1000 / 21.0)
    assert row.tokens_per_s_high == pytest.approx(1000 / 19.0)
    assert (
        row.efficiency_source
        == "calibrated from serve.json (2026-05-01T10:00:00+00:00, openai/gpt-oss-120b)"
    )
    # on two nodes the calibrated node runs half the layers each, plus the RPC messages
    (rpc,) = layout_rows(Request(**{**req.__dict__, "nodes": 2}))
    assert rpc.tokens_per_s < 49.0 and rpc.efficiency_source == row.efficiency_source


def test_a_speed_the_hardware_cannot_reach_is_refused(tmp_path: Path) -> None:
    level = {**serve_result()["levels"][0], "output_tokens_per_s": 5000.0}
    cal = read_serve_result(write(tmp_path, serve_result(levels=[level])))
    req = Request(catalog.find_model("llama-3.3-70b"), STRIX, ROCE, nodes=1, calibration=cal)
    with pytest.raises(
        UsageError, match=r"5000 tok/s would read .* more than the hardware.s 256 GB/s"
    ):
        calibrated(req, cal)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{oops", re.escape("not JSON (Expecting property name enclosed in double quotes")),
        (
            '{"levels": [{"output_tokens_per_s": 1e400}]}',
            re.escape("not JSON (number 1e400 is out of range)"),
        ),
        (
            '{"input_len": 1' + "0" * 400 + "}",
            re.escape("not JSON (number 100000000000000000000000... (401 digits) is out of range)"),
        ),
        ("[" * 100_000 + "]" * 100_000, re.escape("not JSON (nested deeper than 100 levels)")),
        ("[]", "expected a JSON object"),
        (
            serve_result(schema="halo.bench.net/1"),
            "schema is 'halo.bench.net/1', expected 'halo.bench.serve/1'",
        ),
        (serve_result(levels=[]), "levels must be a non-empty list"),
        (serve_result(levels=[{"concurrency": 4}]), "no levels\\[\\] entry with concurrency 1"),
        (
            serve_result(levels=[{"concurrency": 1, "output_tokens_per_s": float("nan")}]),
            re.escape("not JSON (NaN is not a number JSON allows)"),
        ),
        (
            serve_result(levels=[{"concurrency": 1, "output_tokens_per_s": None}]),
            "levels\\[0\\].output_tokens_per_s must be a finite number, got None",
        ),
        (
            serve_result(levels=[{"concurrency": 1, "output_tokens_per_s": 0}]),
            "levels\\[0\\].output_tokens_per_s must be > 0",
        ),
        (serve_result(input_len="512"), "input_len must be a whole number >= 0, got '512'"),
        (
            serve_result(plans={"a": {}, "b": {}}),
            "plans names 2 nodes; --calibrate needs a one-node",
        ),
    ],
)
def test_bad_results(tmp_path: Path, data: object, message: str) -> None:
    path = write(tmp_path, data)
    with pytest.raises(UsageError, match=message) as err:
        read_serve_result(path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_what_a_result_says_is_shown_short(tmp_path: Path) -> None:
    long = serve_result(model="m" * 100_000, created="c" * 100_000)
    cal = read_serve_result(write(tmp_path, long))
    assert (len(cal.model), len(cal.created)) == (200, 64)
    bad = serve_result(
        levels=[{"concurrency": 1, "output_tokens_per_s": 9.0, "errors": "e" * 10**6}]
    )
    with pytest.raises(UsageError) as err:
        read_serve_result(write(tmp_path, bad))
    assert str(err.value) == f"{tmp_path / 'serve.json'}: levels[0].errors must be a whole number"
