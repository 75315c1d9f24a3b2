"""How the suite runs on two workers (pytest-xdist: ``-n 2 --dist loadgroup``, what
``make test`` and ``make unit`` run; docs/testing.md has the measurements).

- The lab and engine tiers live in ``*_lab.py`` files (tests/tiers.py checks it), and each
  such file is in one of two chains, ``LAB_CHAINS``, of about equal length (measured: the
  seconds beside each file are a run's): a chain's files run on one worker, one test after
  another, so that the two chains run side by side, each with its own labs (a lab's names,
  addresses and processes are its own; what a test checks on the host is limited to what
  it started) and no more than two vLLM or llama.cpp servers starting at once.
- Each other file is a group of its own: its module fixtures are made once.
- The chains go first (they are the longest); unit files go to whichever worker is free.
  A lab test keeps its priority and a unit test runs at a lower one (as root), so that a
  unit test beside a chain takes the cores its lab and engine tests leave idle (they wait
  on SSH, on a supervisor's round, on a server's start) instead of slowing them down.

pytest-xdist's own ``loadgroup`` reads ``xdist_group`` markers by rewriting node ids, which
pytest 9.2 no longer allows; this scheduler groups by file name instead."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

# every lab file in one chain; a new one joins the shorter (tests/tiers.py fails on one left out)
LAB_CHAINS = {
    "chain-1": (  # ~1280 s by the clean-clone run at a717d09 (docs/testing.md)
        "tests/cluster/test_serve_lab.py",  # 953 (vLLM's whole story; ~60 s of it a Ray wait
        # without Ray's token in the supervisor, fixed since)
        "tests/bench/test_bench_lab.py",  # 157
        "tests/cluster/test_supervise_lab.py",  # 93 (llama.cpp's faults)
        "tests/test_lab.py",  # 40
        "tests/models/test_model_lab.py",  # 37
        "tests/cluster/test_serve_llama_lab.py",  # 28
        "tests/monitor/test_monitor_lab.py",  # 18
        "tests/test_agentless_lab.py",  # 13
        "tests/engines/test_third_engine_lab.py",  # 6
    ),
    "chain-2": (  # ~1350 s
        "tests/cluster/test_mesh_lab.py",  # 373
        "tests/test_demo_lab.py",  # 353 (with the gateway part)
        "tests/recipes/test_tune_lab.py",  # 232
        "tests/capacity/test_lab_profile_lab.py",  # 222
        "tests/cluster/test_lifecycle_lab.py",  # 70
        "tests/cluster/test_ray_auth_lab.py",  # 60
        "tests/deploy/test_gateway_lab.py",  # 35
        "tests/bench/test_serve_tunnel_lab.py",  # 5
        "tests/test_doctor_ssh_lab.py",  # 1
    ),
}
CHAIN_OF = {path: chain for chain, paths in LAB_CHAINS.items() for path in paths}
UNIT_NICENESS = 4  # CPU weight 423 against a lab test's 1024: about 30 % of a shared core


def in_cluster_file(nodeid: str) -> bool:
    """Whether a test lives in a lab file (``tests/.../test_something_lab.py``)."""
    return Path(nodeid.split("::", 1)[0]).stem.endswith("_lab")


def group_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return CHAIN_OF.get(path, path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileGroups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False  # the collection's order: the chains first
    return FileGroups(config, log)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Lab files first, in every worker alike (their collections must be equal)."""
    items.sort(key=lambda item: not in_cluster_file(item.nodeid))


def chain_problem(nodeid: str) -> str | None:
    """A lab file that is in no chain (it would run beside everything, unordered)."""
    path = nodeid.split("::", 1)[0]
    if in_cluster_file(nodeid) and path not in CHAIN_OF:
        return f"{path}: a lab file in no chain: add it to LAB_CHAINS in tests/parallel.py"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if not hasattr(item.config, "workerinput") or os.geteuid() != 0:
        return
    niceness = 0 if in_cluster_file(item.nodeid) else UNIT_NICENESS
    os.setpriority(os.PRIO_PROCESS, 0, niceness)  # root may raise it back
