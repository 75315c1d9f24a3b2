"""The pure part of bench collective / bench tp: sizes, bus bandwidth, the α/β fit (checked
against the capacity planner's own all-reduce model), the decode schedule and the driver's events."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.bench.allreduce import (
    MAX_BYTES,
    bus_factor,
    fit_alpha_beta,
    parse_size,
    parse_sizes,
    predicted_s,
    sweep_row,
    tp_schedule,
)
from halo_cluster.bench.driver import main_driver
from halo_cluster.bench.events import read_events
from halo_cluster.capacity.catalog import find_model
from halo_cluster.capacity.estimate import allreduce_s, tp_collectives_per_token
from halo_cluster.capacity.spec import Link
from halo_cluster.errors import UsageError
from halo_cluster.units import human_bytes


def test_sizes() -> None:
    assert parse_sizes("8B:64") == [8, 16, 32, 64]
    assert parse_sizes("8B:256MiB")[-1] == 256 << 20 and len(parse_sizes("8B:256MiB")) == 26
    assert parse_sizes("64KiB,8KiB,8k, 1MB") == [8192, 65536, 1_000_000]
    assert parse_size("2GiB") == 2 << 30
    for bad in ("", "8XB", "-1", "0", "9GiB", "1.5MiB"):
        with pytest.raises(UsageError):
            parse_sizes(bad) if bad else parse_sizes(",")
    with pytest.raises(UsageError, match="must not exceed"):
        parse_sizes("1MiB:8")


@given(st.text(max_size=20))
def test_size_parser_never_crashes(text: str) -> None:
    try:
        sizes = parse_sizes(text)
    except UsageError:
        return
    assert sizes and all(1 <= s <= MAX_BYTES for s in sizes)


def test_sweep_row_uses_the_nccl_tests_bus_factor() -> None:
    row = sweep_row(1 << 20, 1e-3, 4)
    assert row == {
        "bytes": 1 << 20,
        "time_us": 1000.0,
        "algbw_gbs": 1.04858,
        "busbw_gbs": 1.57286,
    }
    assert bus_factor(2) == 1.0 and bus_factor(8) == 1.75 and bus_factor(1) == 1.0


@given(
    alpha=st.floats(0.5, 2000),
    beta=st.floats(0.1, 400),
    ranks=st.integers(2, 16),
)
def test_the_fit_recovers_alpha_beta_of_the_planners_own_model(
    alpha: float, beta: float, ranks: int
) -> None:
    link = Link("x", "x", alpha, beta, "test")
    sizes = [8 << i for i in range(0, 24, 2)]
    rows = [
        {"bytes": s, "time_us": allreduce_s(s, ranks, link) * 1e6, "algbw_gbs": 0, "busbw_gbs": 0}
        for s in sizes
    ]
    fit = fit_alpha_beta(rows, ranks)
    assert fit is not None
    assert fit["alpha_us"] == pytest.approx(alpha, rel=1e-3)
    assert fit["beta_gbps"] == pytest.approx(beta, rel=1e-3)
    assert fit["max_rel_error"] < 1e-3
    for size in sizes:
        assert predicted_s(fit, size, ranks) == pytest.approx(allreduce_s(size, ranks, link), 1e-3)


def test_fit_needs_two_sizes_two_ranks_and_a_positive_slope() -> None:
    row = {"bytes": 8, "time_us": 10.0, "algbw_gbs": 0, "busbw_gbs": 0}
    assert fit_alpha_beta([row], 2) is None
    assert fit_alpha_beta([row, {**row, "bytes": 16}], 1) is None
    assert fit_alpha_beta([row, {**row, "bytes": 16, "time_us": 5.0}], 2) is None


def test_decode_schedule_matches_the_planner() -> None:
    model = find_model("llama-3.1-8b")
    schedule = tp_schedule(model.layers, model.hidden, 8)
    assert schedule == {"allreduces": 66, "bytes": 8 * 4096 * 2}
    assert schedule["allreduces"] == tp_collectives_per_token(model)


def test_driver_events() -> None:
    lines = [
        json.dumps({"event": "progress", "message": "2 ranks"}),
        "a line Ray printed",
        "[1, 2]",
        json.dumps({"event": "result", "result": {"world_size": 2}}),
    ]
    assert read_events(lines) == ({"world_size": 2}, None)
    assert read_events([json.dumps({"event": "error", "message": "node2 gone"})]) == (
        None,
        "node2 gone",
    )
    out: list[str] = []
    assert main_driver("{not json", out.append) == 1
    assert json.loads(out[0])["event"] == "error"
    assert human_bytes(8) == "8B" and human_bytes(65536) == "64KiB"
    assert human_bytes(3 << 19) == "1.5MiB"
