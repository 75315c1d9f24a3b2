"""The tier check (tests/tiers.py): a test's markers against the fixtures it uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.parallel import LAB_CHAINS, chain_problem, group_of
from tests.tiers import tier_problem

T = "tests/x_lab.py::t"


@pytest.mark.parametrize(
    ("marked", "fixtures", "problem"),
    [
        ([], {"tmp_path"}, None),
        (["unit"], set(), None),
        (["lab"], {"lab_host", "tmp_path"}, None),
        (["engine"], {"lab_host", "vllm_engine"}, None),
        (["engine"], {"llama_cpp"}, None),
        ([], {"lab_host"}, f"{T}: uses lab_host (a lab) but is a unit test: mark it lab"),
        (["unit"], {"lab_host"}, f"{T}: uses lab_host (a lab) but is a unit test: mark it lab"),
        (
            ["lab"],
            {"lab_host", "vllm_engine"},
            f"{T}: uses vllm_engine (a real engine) but is marked lab: mark it engine",
        ),
        (
            [],
            {"llama_cpp"},
            f"{T}: uses llama_cpp (a real engine) but is marked unit: mark it engine",
        ),
        (["lab"], {"tmp_path"}, f"{T}: marked lab but uses no lab fixture (lab_host)"),
        (["lab", "engine"], {"vllm_engine"}, f"{T}: in 2 tiers (lab, engine); a test is in one"),
    ],
)
def test_markers_against_fixtures(
    marked: list[str], fixtures: set[str], problem: str | None
) -> None:
    assert tier_problem(T, marked, fixtures) == problem


def test_an_engine_marker_without_an_engine_fixture_names_them() -> None:
    found = tier_problem(T, ["engine"], {"lab_host"})
    assert found is not None and found.startswith(f"{T}: marked engine but uses no engine fixture")
    assert "vllm_engine" in found and "llama_cpp" in found


def test_this_suite_is_in_its_tiers(request: pytest.FixtureRequest) -> None:
    """Collection added the default marker: this unmarked test is a unit test."""
    assert request.node.get_closest_marker("unit") is not None


def test_lab_and_engine_tests_live_in_lab_files() -> None:
    assert tier_problem("tests/x.py::t", ["lab"], {"lab_host"}) == (
        "tests/x.py::t: lab tests live in files named test_*_lab.py (tests/parallel.py)"
    )
    assert tier_problem("tests/x.py::t", [], {"tmp_path"}) is None


def test_every_lab_file_is_in_one_chain() -> None:
    assert chain_problem("tests/new_lab.py::t") == (
        "tests/new_lab.py: a lab file in no chain: add it to LAB_CHAINS in tests/parallel.py"
    )
    assert chain_problem("tests/test_lab.py::t") is None
    assert chain_problem("tests/test_lab_cabling.py::t") is None  # not a lab file
    listed = [path for paths in LAB_CHAINS.values() for path in paths]
    assert len(listed) == len(set(listed))
    root = Path(__file__).parent.parent
    assert [p for p in listed if not (root / p).is_file()] == []


def test_groups() -> None:
    assert group_of("tests/cluster/test_mesh_lab.py::test_a_four_node_ring") == "chain-2"
    assert group_of("tests/test_lab.py::test_usage_errors") == "chain-1"
    assert group_of("tests/test_cli.py::test_x[a::b]") == "tests/test_cli.py"
