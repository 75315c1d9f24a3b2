"""The suite's three tiers, one marker each, and the collection check that keeps them true.

- ``unit``: pure code, fixture roots, recorded outputs, short-lived local tools. A test with
  no tier marker is a unit test (the marker is added at collection).
- ``lab``: network namespaces, sshd, Ray, Gloo, Prometheus, Chromium. Its prerequisites come
  from the ``lab_host`` fixture (tests/needs.py), the only way a test gets them.
- ``engine``: a real vLLM or llama.cpp server, through ``vllm_engine`` or ``llama_cpp``.

What a test starts is known from the fixtures it uses (their closure, so a shared lab that
depends on ``lab_host`` counts): collection fails on a test that uses a lab fixture without
``lab`` or ``engine``, an engine fixture without ``engine``, a tier marker whose fixture it
never uses, two tier markers, or a lab or engine test outside a ``test_*_lab.py`` file (where
tests/parallel.py runs them one after another). ``make unit`` is ``pytest -m unit``."""

from __future__ import annotations

import pytest

from tests.parallel import chain_problem, in_cluster_file

TIERS = ("unit", "lab", "engine")
LAB_FIXTURES = frozenset({"lab_host"})
ENGINE_FIXTURES = frozenset({"vllm_engine", "llama_cpp"})
MARKERS = {
    "unit": "pure code, fixture roots, recorded outputs, short-lived local tools (the default)",
    "lab": "network namespaces, sshd, Ray, Gloo, Prometheus, Chromium (needs root)",
    "engine": "a real vLLM or llama.cpp server (needs make engine / make llama-cpp)",
}


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def tier_problem(name: str, marked: list[str], fixtures: set[str]) -> str | None:
    """Why a test's tier markers disagree with the fixtures it uses, or None."""
    if len(marked) > 1:
        return f"{name}: in {len(marked)} tiers ({', '.join(marked)}); a test is in one"
    tier = marked[0] if marked else "unit"
    engine = sorted(fixtures & ENGINE_FIXTURES)
    lab = sorted(fixtures & LAB_FIXTURES)
    if engine and tier != "engine":
        return f"{name}: uses {engine[0]} (a real engine) but is marked {tier}: mark it engine"
    if lab and tier == "unit":
        return f"{name}: uses {lab[0]} (a lab) but is a unit test: mark it lab"
    if tier == "engine" and not engine:
        return f"{name}: marked engine but uses no engine fixture ({', '.join(sorted(ENGINE_FIXTURES))})"
    if tier == "lab" and not lab:
        return f"{name}: marked lab but uses no lab fixture (lab_host)"
    if tier != "unit" and not in_cluster_file(name):
        return f"{name}: {tier} tests live in files named test_*_lab.py (tests/parallel.py)"
    return None


PROBLEMS = pytest.StashKey[list[str]]()


def pytest_itemcollected(item: pytest.Item) -> None:
    """Each test's tier, checked, as it is collected: before any plugin's
    pytest_collection_modifyitems reads the markers (-m selects by them)."""
    marked = [m for m in TIERS if item.get_closest_marker(m) is not None]
    problem = tier_problem(item.nodeid, marked, set(getattr(item, "fixturenames", ())))
    problem = problem or chain_problem(item.nodeid)
    if problem is not None:
        item.config.stash.setdefault(PROBLEMS, []).append(problem)
        return
    if not marked:
        item.add_marker(pytest.mark.unit)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problems = config.stash.get(PROBLEMS, [])
    if problems:
        raise pytest.UsageError("tier markers disagree with fixtures:\n  " + "\n  ".join(problems))
