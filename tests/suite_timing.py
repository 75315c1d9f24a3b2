"""Where the suite's minutes go, recorded by the run itself (``pytest --suite-timing FILE``,
what ``make test-durations`` runs): every test's tier and its set-up, call and teardown
seconds; every fixture set-up over 50 ms with its scope; and the seconds spent in each kind
of ``halo`` command the tests run (``lab up``, ``serve``, ``up``, ``lab model``, ...), timed
where the tests call ``subprocess.run``. Without the option nothing is recorded or patched.

Each test carries its own figures in its report's ``user_properties``, so that a parallel
run (pytest-xdist) sends them from its workers to the one process that writes the file.
``tools/test_suite.py record`` turns the file into benchmarks/results/test_suite.json."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Generator
from typing import Any

import pytest

from tests.tiers import TIERS

SCHEMA = "halo.test_suite_raw/1"
TWO_WORD = {"lab", "model", "bench", "monitoring", "plan", "logs"}  # halo lab up, ...
TIER, FIXTURE, COMMAND = "suite_timing.tier", "suite_timing.fixture", "suite_timing.command"
RUNNING: list[pytest.Item] = []  # the test running in this process, while it runs


class Recorder:
    """What the process that reports (the only one, or xdist's controller) writes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.tests: dict[str, dict[str, Any]] = {}
        self.fixtures: list[dict[str, Any]] = []
        self.commands: dict[str, dict[str, float]] = {}
        self.started = time.monotonic()

    def report(self, report: pytest.TestReport) -> None:
        entry = self.tests.setdefault(
            report.nodeid,
            {"test": report.nodeid, "file": report.nodeid.split("::")[0], "outcome": "passed"},
        )
        entry[report.when] = round(report.duration, 3)
        if report.failed:
            entry["outcome"] = "failed"
        elif report.skipped and entry["outcome"] == "passed":
            entry["outcome"] = "skipped"
        if report.when != "teardown":
            return
        for key, value in report.user_properties:  # complete once the test is torn down
            if key == TIER:
                entry["tier"] = value
            elif key == FIXTURE:
                self.fixtures.append(dict(value, test=report.nodeid))
            elif key == COMMAND:
                kind, seconds = value
                row = self.commands.setdefault(kind, {"calls": 0, "seconds": 0.0})
                row["calls"] += 1
                row["seconds"] += seconds

    def write(self, exit_status: int) -> None:
        document = {
            "schema": SCHEMA,
            "pytest_seconds": round(time.monotonic() - self.started, 1),
            "exit_status": exit_status,
            "tests": list(self.tests.values()),
            "fixtures": self.fixtures,
            "commands": self.commands,
        }
        partial = f"{self.path}.partial"
        with open(partial, "w") as handle:
            json.dump(document, handle, indent=1)
        os.replace(partial, self.path)


ACTIVE: list[Recorder] = []


def command_kind(argv: Any) -> str | None:
    """``halo lab up`` for ``[".../halo", "lab", "up", "--name", ...]``; None for another
    program. ``python -m halo_cluster ...`` counts as halo too."""
    if isinstance(argv, (str, bytes)) or not argv:
        return None
    words = [str(a) for a in argv]
    if os.path.basename(words[0]) == "halo":
        rest = words[1:]
    elif len(words) > 2 and words[1:3] == ["-m", "halo_cluster"]:
        rest = words[3:]
    else:
        return None
    plain = [w for w in rest if not w.startswith("-")]
    if not plain:
        return "halo"
    if plain[0] in TWO_WORD and len(plain) > 1 and not plain[1].startswith(("/", ".")):
        return f"halo {plain[0]} {plain[1]}"
    return f"halo {plain[0]}"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--suite-timing",
        metavar="FILE",
        default=None,
        help="write every test's and fixture's seconds and the halo commands' time to FILE",
    )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--suite-timing")
    if not path:
        return
    if not hasattr(config, "workerinput"):  # a worker's figures travel in its reports
        ACTIVE[:] = [Recorder(os.path.abspath(path))]
    real_run = subprocess.run

    def timed_run(*args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            return real_run(*args, **kwargs)
        finally:
            kind = command_kind(args[0] if args else kwargs.get("args"))
            if kind is not None and RUNNING:
                RUNNING[0].user_properties.append((COMMAND, [kind, time.monotonic() - start]))

    subprocess.run = timed_run  # type: ignore[assignment]


def _timing(config: pytest.Config) -> bool:
    return bool(config.getoption("--suite-timing"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    if _timing(item.config):
        tier = next((t for t in TIERS if item.get_closest_marker(t) is not None), "unit")
        item.user_properties.append((TIER, tier))
        RUNNING[:] = [item]
    try:
        yield
    finally:
        RUNNING.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, None, None]:
    start = time.monotonic()
    yield
    seconds = time.monotonic() - start
    if RUNNING and seconds >= 0.05:  # the many instant ones are left out
        row = {"fixture": fixturedef.argname, "scope": fixturedef.scope, "seconds": seconds}
        RUNNING[0].user_properties.append((FIXTURE, row))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if ACTIVE:
        ACTIVE[0].report(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if ACTIVE:
        ACTIVE[0].write(int(exitstatus))
