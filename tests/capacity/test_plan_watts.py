"""`halo plan --watts`: tokens per joule for each layout, from the hardware profile's typical
draw, a number of watts, or a bench serve run that measured the nodes' power; a run or a
profile without a figure is one line, never a made-up number."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from halo_cluster.capacity.catalog import find_hardware
from halo_cluster.capacity.power import Draw, given_draw, measured_draw, nodes_used
from halo_cluster.errors import UsageError
from tests.capacity.test_cli_capacity import halo, plan_json


def test_the_typical_draw_gives_tokens_per_joule_over_the_nodes_used(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = plan_json(capsys, "llama-3.3-70b", "--nodes", "2", "--watts")
    assert data["power"]["watts_per_node"] == 76 and "typical draw" in data["power"]["source"]
    for row in data["rows"]:
        assert row["nodes_used"] == 2
        assert row["tokens_per_joule"] == round(row["tokens_per_s"] / (2 * 76), 4)
        assert row["tokens_per_joule_batch1"] == round(row["tokens_per_s_batch1"] / (2 * 76), 4)


def test_watts_given_and_the_table_says_where_they_come_from(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = plan_json(capsys, "gpt-oss-120b", "--engine", "llama.cpp", "--nodes", "1",
                     "--watts", "100")  # fmt: skip
    assert data["power"] == {"watts_per_node": 100.0, "source": "given: 100 W per node"}
    code, out, _err = halo(capsys, "plan", "gpt-oss-120b", "--nodes", "1", "--watts", "100")
    assert code == 0 and "tok/J" in out and "power: 100 W per node" in out


def test_a_run_that_measured_the_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "serve.json"
    nodes = [{"node": "n1", "seconds": 10.0, "joules": 800.0},
             {"node": "n2", "seconds": 10.0, "joules": None, "problem": "no power source"}]
    levels = [{"energy": {"nodes": nodes}}, {"energy": "odd"}, 7]
    run.write_text(json.dumps({"schema": "halo.bench.serve/1", "levels": levels}))
    data = plan_json(capsys, "llama-3.3-70b", "--watts", str(run))
    assert data["power"] == {"watts_per_node": 80.0, "source": f"measured: {run}, 1 node(s)"}


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "1e308", "lots"])
def test_bad_watts_are_one_line(capsys: pytest.CaptureFixture[str], value: str) -> None:
    code, _out, err = halo(capsys, "plan", "llama-3.3-70b", f"--watts={value}")
    # (click reads '-5' as an option: that refusal is one line too)
    assert code == 2 and ("--watts" in err or "No such option '-5'" in err)
    assert "Traceback" not in err


def test_no_figure_is_said_not_invented(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="has no typical draw"):
        given_draw("hardware", find_hardware("generic"))
    with pytest.raises(UsageError, match="no node's power was measured"):
        measured_draw({"levels": [{"energy": {"nodes": [{"node": "n1", "joules": None}]}}]}, "r")
    found: Any = given_draw("f.json", find_hardware("generic"))
    assert found is None  # a file: measured_draw reads it
    assert given_draw("80", find_hardware("generic")) == Draw(80.0, "given: 80 W per node")


def test_nodes_used_by_a_layout() -> None:
    assert [nodes_used(2, 1, 1), nodes_used(1, 3, 1), nodes_used(4, 1, 2), nodes_used(1, 1, 4)] \
        == [2, 3, 2, 1]
