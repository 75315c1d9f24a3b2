"""One description of the versioned results and one validator for every reader."""

from __future__ import annotations

from typing import Any, get_type_hints

import pytest

from halo_cluster import schema
from halo_cluster.bench.allreduce import fit_alpha_beta, sweep_row
from halo_cluster.errors import UsageError
from tests.bench.test_results import collective_result, net_result, tp_result


def test_schemas_and_kinds() -> None:
    assert schema.SCHEMAS == {
        "net": "halo.bench.net/1",
        "collective": "halo.bench.collective/1",
        "tp": "halo.bench.tp/1",
        "serve": "halo.bench.serve/1",
        "tune": "halo.tune/1",
        "run": "halo.run/1",
    }


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "r.json: not a halo benchmark result (no halo.bench.* schema)"),
        ({"schema": "other/1"}, "r.json: not a halo benchmark result (no halo.bench.* schema)"),
        (
            {"schema": "halo.bench.nope/1"},
            "r.json: not a kind of result this halo knows ('halo.bench.nope/1')",
        ),
        (
            {"schema": "halo.bench.net/2"},
            "r.json: schema 'halo.bench.net/2' is not one this halo reads (halo.bench.net/1)",
        ),
    ],
)
def test_result_kind_refuses_in_one_line(data: object, message: str) -> None:
    with pytest.raises(UsageError) as raised:
        schema.result_kind(data, "r.json")
    assert str(raised.value) == message


def test_result_kind_and_require_kind() -> None:
    assert schema.result_kind({"schema": "halo.bench.tp/1"}, "r.json") == "tp"
    schema.require_kind({"schema": "halo.bench.serve/1"}, "serve", "r.json")
    with pytest.raises(
        UsageError, match=r"schema is 'halo.bench.net/1', expected 'halo.bench.serve/1' \(hint\)"
    ):
        schema.require_kind({"schema": "halo.bench.net/1"}, "serve", "r.json", " (hint)")


def _keys(kind: type) -> set[str]:
    return set(get_type_hints(kind))


@pytest.mark.parametrize(
    ("result", "kind"),
    [
        (net_result(), schema.NetBenchResult),
        (collective_result(), schema.CollectiveBenchResult),
        (tp_result(), schema.TpBenchResult),
    ],
)
def test_the_types_name_every_key_results_carry(result: dict[str, Any], kind: type) -> None:
    assert set(result) <= _keys(kind)


def test_net_paths_and_rows_are_described() -> None:
    for path in net_result()["paths"]:
        assert set(path) <= _keys(schema.NetPath)
    for row in tp_result()["rows"]:
        assert set(row) <= _keys(schema.TpRow)
    rows = [sweep_row(8 << i, 1e-5 * (1 + i), 2) for i in range(4)]
    assert set(rows[0]) == _keys(schema.SweepRow)
    fit = fit_alpha_beta(rows, 2)
    assert fit is not None and set(fit) == _keys(schema.Fit)
