"""benchmarks/bench_serve_vs_vllm.py's target: halo's mean TTFT no farther from the server's
own than `vllm bench serve`'s (median over the rounds of each tool's distance), ITL p50 and
output tokens/s within 10 %, the server's window holding only the run's requests; and the
committed result is what the script's target makes of its own rounds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).parents[2] / "benchmarks" / "bench_serve_vs_vllm.py"
RESULTS = BENCH.parent / "results" / "serve_vs_vllm.json"


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_serve_vs_vllm", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(
    ttft_mean: float, server_ttft: float, tok_s: float = 500.0, itl: float = 2.0
) -> dict[str, Any]:
    """One tool's run as the script records it, with the server's reading over it."""
    return {
        "output_tok_s": tok_s,
        "ttft_p50_ms": ttft_mean,
        "itl_p50_ms": itl,
        "tpot_p50_ms": itl,
        "ttft_mean_ms": ttft_mean,
        "server_mean": {"ttft_mean_ms": server_ttft, "itl_mean_ms": itl, "requests": 16.0},
    }


def test_halo_nearer_the_server_meets_the_target_with_its_ttft_p50_11_percent_shorter() -> None:
    halo = [run(8.0, 7.0), run(9.5, 8.0), run(7.2, 6.0)]  # 1.0, 1.5, 1.2 ms above the server
    vllm = [run(10.0, 8.0), run(9.0, 7.0), run(8.5, 6.0, tok_s=460.0)]  # 2.0, 2.0, 2.5
    assert bench().target(halo, vllm, 16) == {
        "ttft_from_server_ms": {"halo": 1.2, "vllm": 2.0},
        "ratio": {"itl_p50_ms": 1.0, "output_tok_s": 1.0},
        "checks": {
            "server_saw_only_the_runs": True,
            "ttft_no_farther_from_server": True,
            "itl_p50_within_10pct": True,
            "output_tok_s_within_10pct": True,
        },
        "met": True,
    }


def test_a_client_farther_from_the_server_fails_however_its_ttft_compares() -> None:
    # halo's TTFT is below the server's own by more than vLLM's is above it: farther.
    halo = [run(5.0, 7.5), run(5.0, 7.5)]
    vllm = [run(8.0, 7.5), run(8.0, 7.5)]
    found = bench().target(halo, vllm, 16)
    assert found["ttft_from_server_ms"] == {"halo": 2.5, "vllm": 0.5}
    assert found["checks"]["ttft_no_farther_from_server"] is False and found["met"] is False


def test_itl_and_throughput_must_stay_within_10_percent() -> None:
    halo = [run(8.0, 7.0, tok_s=560.0, itl=2.3)]
    vllm = [run(9.0, 7.0, tok_s=500.0, itl=2.0)]
    found = bench().target(halo, vllm, 16)
    assert found["ratio"] == {"itl_p50_ms": 1.15, "output_tok_s": 1.12}
    assert found["checks"] == {
        "server_saw_only_the_runs": True,
        "ttft_no_farther_from_server": True,
        "itl_p50_within_10pct": False,
        "output_tok_s_within_10pct": False,
    }


def test_a_server_window_with_a_request_more_than_the_run_is_no_witness() -> None:
    """A warm-up in the window (17 requests for 16 prompts) makes the server's mean no
    witness of that run: the check fails rather than compare unlike windows."""
    warm = run(8.0, 7.9)
    warm["server_mean"]["requests"] = 17.0
    found = bench().target([warm, run(8.0, 7.0)], [run(9.0, 7.0), run(9.0, 7.0)], 16)
    assert found["ttft_from_server_ms"] == {"halo": 1.0, "vllm": 2.0}
    assert found["checks"]["server_saw_only_the_runs"] is False
    assert found["checks"]["ttft_no_farther_from_server"] is False and found["met"] is False
    assert bench().target([], [run(9.0, 7.0)], 16) is None


def test_the_committed_result_is_the_targets_verdict_on_its_own_rounds() -> None:
    module = bench()
    data = json.loads(RESULTS.read_text())
    for cases, met in (
        (data["cases"], data["met"]),
        (data["stand_in"]["cases"], data["stand_in"]["met"]),
    ):
        for case in cases:
            rounds = case["rounds"]
            again = module.target(
                [r["halo"] for r in rounds], [r["vllm"] for r in rounds], case["prompts"]
            )
            assert case["target"] == again
            assert all(r["ttft_from_server_ms"]["halo"] is not None for r in rounds)
        assert met == all(case["target"]["met"] for case in cases)
