"""`halo plan --nodes N` with replicas: N // k copies of each k-node layout, each on its own
nodes; one request sees one replica, --batch requests are spread evenly over them and their
rates (the planner's own per-layout model at each replica's concurrency) add."""

from __future__ import annotations

from dataclasses import replace

import pytest

from halo_cluster.capacity import catalog
from halo_cluster.capacity.engines import find_engine
from halo_cluster.capacity.estimate import Request, evaluate, layout_rows
from halo_cluster.capacity.replicas import replica_counts, replica_rows, spread
from tests.capacity.test_cli_capacity import ROW_KEYS, halo, plan_json

MODELS = catalog.models()
STRIX = catalog.find_hardware("strix-halo-128")
ROCE = catalog.find_link("roce")
LLAMA_CPP = find_engine("llama.cpp")


def llama_cpp(model: str = "llama-3.1-8b", **more: object) -> Request:
    return Request(MODELS[model], STRIX, ROCE, engine=LLAMA_CPP, **more)  # type: ignore[arg-type]


def test_replica_counts_leave_room_for_two_or_more() -> None:
    assert [replica_counts(n) for n in (1, 2, 3, 4, 5, 6)] == [
        [],
        [(1, 2)],
        [(1, 3)],  # two nodes each: one replica only, no row
        [(1, 4), (2, 2)],
        [(1, 5), (2, 2)],  # 2 x 2 nodes: the fifth node stays idle
        [(1, 6), (2, 3), (3, 2)],
    ]


@pytest.mark.parametrize(
    ("nodes", "llama", "vllm"),
    [
        (2, ["2 x single"], [("2 x TP1", 1, 1)]),
        (3, ["3 x single"], [("3 x TP1", 1, 1)]),
        (4, ["4 x single", "2 x RPC2"], [("4 x TP1", 1, 1), ("2 x TP2", 2, 1), ("2 x PP2", 1, 2)]),
    ],
)
def test_replica_rows_on_2_3_4_nodes(
    nodes: int, llama: list[str], vllm: list[tuple[str, int, int]]
) -> None:
    rows = replica_rows(llama_cpp(nodes=nodes))
    assert [r.layout for r in rows] == llama
    assert [r.replicas for r in rows] == [int(name.split(" x ")[0]) for name in llama]
    vrows = replica_rows(Request(MODELS["llama-3.1-8b"], STRIX, ROCE, nodes=nodes))
    assert [(r.layout, r.tp, r.pp) for r in vrows] == vllm


def test_one_node_replicas_left_out_when_asked() -> None:
    assert [r.layout for r in replica_rows(llama_cpp(nodes=4), one_node=False)] == ["2 x RPC2"]
    assert replica_rows(llama_cpp(nodes=1)) == []


@pytest.mark.parametrize(
    ("batch", "replicas", "loads"),
    [
        (4, 2, [(2, 2)]),
        (5, 2, [(3, 1), (2, 1)]),
        (6, 4, [(2, 2), (1, 2)]),
        (1, 4, [(1, 1)]),  # three replicas idle
        (3, 4, [(1, 3)]),
    ],
)
def test_requests_spread_evenly(batch: int, replicas: int, loads: list[tuple[int, int]]) -> None:
    assert spread(batch, replicas) == loads
    assert sum(c * n for c, n in loads) == batch


def _layout(req: Request, nodes: int, batch: int, name: str) -> float:
    """The planner's own rate of the ``nodes``-node layout ``name`` at concurrency ``batch``."""
    here = replace(req, nodes=nodes, batch=batch)
    (row,) = [r for r in layout_rows(here) if r.layout == name]
    return row.tokens_per_s


def test_batch_math_r_times_the_layout_at_b_over_r() -> None:
    req = replace(llama_cpp(nodes=4), batch=8)
    four, two = replica_rows(req)
    assert four.tokens_per_s == pytest.approx(4 * _layout(req, 1, 2, "single"))
    assert two.tokens_per_s == pytest.approx(2 * _layout(req, 2, 4, "RPC2"))
    # a single request sees one replica: the layout's own concurrency-1 figure
    assert four.tokens_per_s_batch1 == pytest.approx(_layout(req, 1, 1, "single"))
    assert two.tokens_per_s_batch1 == pytest.approx(_layout(req, 2, 1, "RPC2"))
    # the busiest replica's step, memory and range
    alone = evaluate(replace(req, nodes=1, batch=2), 1, 1, "single")
    assert four.decode_ms_compute == alone.decode_ms_compute
    assert four.kv_gib_per_node == alone.kv_gib_per_node
    assert four.tokens_per_s_low == pytest.approx(4 * alone.tokens_per_s_low)
    assert four.tokens_per_s_high == pytest.approx(4 * alone.tokens_per_s_high)


def test_batch_math_when_r_does_not_divide_b() -> None:
    req = replace(Request(MODELS["llama-3.1-8b"], STRIX, ROCE, nodes=2), batch=5)
    (row,) = replica_rows(req)
    assert row.layout == "2 x TP1"
    assert row.tokens_per_s == pytest.approx(_layout(req, 1, 3, "TP1") + _layout(req, 1, 2, "TP1"))
    assert "1 at concurrency 3 + 1 at concurrency 2" in (row.note or "")
    # fewer requests than replicas: only as many replicas work as there are requests
    (one,) = replica_rows(replace(req, batch=1))
    assert one.tokens_per_s == pytest.approx(one.tokens_per_s_batch1)
    assert "1 at concurrency 1 + 1 idle" in (one.note or "")


def test_a_replica_fits_on_its_own_nodes() -> None:
    # 70 GiB of Q8_0 fits one 128 GiB node, not twice in one: each replica has its own node
    q8 = llama_cpp("llama-3.3-70b", nodes=2, quant="Q8_0")
    (two,) = replica_rows(q8)
    (single,) = layout_rows(replace(q8, nodes=1))
    assert two.layout == "2 x single" and two.fits and single.fits
    assert two.weights_gib_per_node == single.weights_gib_per_node > STRIX.memory_gib / 2
    # 131 GiB of bf16 fits no single node, so no number of one-node replicas; two RPC2 do
    bf16 = llama_cpp("llama-3.3-70b", nodes=4, quant="bf16")
    fits = {r.layout: r.fits for r in replica_rows(bf16)}
    assert fits == {"4 x single": False, "2 x RPC2": True}


def test_a_replica_holds_the_kv_of_its_own_share_of_the_batch() -> None:
    # 16 sequences of 64 k tokens overflow one node's KV; 8 per replica do not
    req = llama_cpp(nodes=2, context=65536, batch=16)
    (single,) = layout_rows(replace(req, nodes=1))
    (two,) = replica_rows(req)
    assert not single.fits and two.fits
    assert two.max_context == evaluate(replace(req, nodes=1, batch=8), 1, 1).max_context


def test_json_rows_carry_replicas_and_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    data = plan_json(capsys, "llama-3.1-8b", "--engine", "llama.cpp", "--nodes", "4",
                     "--batch", "4")  # fmt: skip
    assert all(set(row) == ROW_KEYS for row in data["rows"])
    shown = [(r["layout"], r["link"], r["replicas"]) for r in data["rows"]]
    assert shown == [
        ("RPC4", "roce-e810", 1),
        ("4 x single", "roce-e810", 4),  # one node crosses no link: the first link only
        ("2 x RPC2", "roce-e810", 2),
        ("RPC4", "tcp-e810", 1),
        ("2 x RPC2", "tcp-e810", 2),
    ]
    for row in data["rows"]:
        assert (row["note"] is None) == (row["replicas"] == 1)
    four = data["rows"][1]
    assert four["note"].startswith("4 replicas of single, 1 node each")
    assert four["tokens_per_s"] == pytest.approx(4 * four["tokens_per_s_batch1"], rel=1e-3)
    assert data["recommendation"]["layout"] == "RPC4"  # among the 4-node layouts, as before
    assert data["batch"] == 4 and data["nodes"] == 4


def test_one_node_has_no_replica_rows(capsys: pytest.CaptureFixture[str]) -> None:
    data = plan_json(capsys, "llama-3.1-8b", "--nodes", "1")
    assert [r["replicas"] for r in data["rows"]] == [1]


def test_the_table_marks_replica_rows(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = halo(capsys, "plan", "llama-3.1-8b", "--nodes", "2", "--batch", "3")
    assert code == 0 and "2 x TP1" in out and "R x LAYOUT: R replicas" in out
    code, out, _err = halo(capsys, "plan", "llama-3.1-8b", "--nodes", "1")
    assert code == 0 and "R x LAYOUT" not in out


def test_tokens_per_joule_counts_every_replica_node(capsys: pytest.CaptureFixture[str]) -> None:
    data = plan_json(capsys, "llama-3.1-8b", "--nodes", "4", "--watts", "100")
    used = {r["layout"]: r["nodes_used"] for r in data["rows"] if r["link"] == "roce-e810"}
    assert used["4 x TP1"] == 4 and used["2 x TP2"] == 4 and used["TP4"] == 4
    row = next(r for r in data["rows"] if r["layout"] == "2 x TP2")
    assert row["tokens_per_joule"] == round(row["tokens_per_s"] / (4 * 100), 4)
