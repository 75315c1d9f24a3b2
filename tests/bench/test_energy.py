"""Energy over bench serve's timed windows (bench/energy.py): scripted nodes answering the
``power`` command (a RAPL psys counter, an amdgpu gauge, none, a node that fails), read at
each window's ends and by the sampler in between; the cluster's joules per output token and
its coverage, the honest line where no node has a source, and the sampler thread gone after
every window, also one that ends in an error. Then measure() for real against a loopback
server with those nodes."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest

from halo_cluster.bench.energy import Meter, node_reader, watts_series
from halo_cluster.bench.serve_load import measure
from halo_cluster.client.node import NodeClient
from halo_cluster.config import NodeConfig
from halo_cluster.facts.energy import Sample
from halo_cluster.facts.model import PowerReading
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.result import Result
from halo_cluster.wire.answers import Power
from tests.bench.fake_openai import FakeOpenAI, serving

PSYS = "intel-rapl:2/energy_uj"
GPU = "hwmon3/power1_average"


class Clock:
    """The meter's clock, moved by the test (the readers' answers follow it)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def counter(clock: Clock, watts: float = 40.0, start_j: float = 500.0) -> Callable[[], Power]:
    """A node whose RAPL psys counter gains ``watts`` joules a second."""
    reading = lambda: PowerReading(  # noqa: E731
        PSYS, "rapl", "psys", "energy", start_j + watts * clock.now, 262143.0
    )
    return lambda: Power((reading(),))


def gauge(watts: float = 25.0) -> Callable[[], Power]:
    return lambda: Power((PowerReading(GPU, "amdgpu", "gpu", "power", watts),))


def node(name: str, answer: Callable[[], Power] | None, calls: list[str]) -> NodeClient:
    """A scripted node with an installed halo: its ``power`` command answers ``answer()``
    (None: the command fails as a node whose halo is broken)."""

    def run(args: tuple[str, ...]) -> Result:
        calls.append(name)
        assert args == ("/h/halo", "power")
        if answer is None:
            return Result(args, 1, "", "halo: error: broken\n")
        return Result(args, 0, json.dumps(answer().to_dict()), "")

    config = NodeConfig(name, name, None, halo="/h/halo")
    return NodeClient(config, FakeRunner().on((), run))


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "halo-power-sampler"]


def test_a_counter_a_gauge_and_a_node_without_a_source() -> None:
    clock, calls = Clock(), list[str]()
    clients = {
        "node1": node("node1", counter(clock), calls),
        "node2": node("node2", gauge(), calls),
        "node3": node("node3", lambda: Power(()), calls),
    }
    meter = Meter(list(clients), node_reader(clients), interval_s=3600, clock=clock)
    assert meter.probe() == {"node3": "no power source"}
    with meter.window() as window:
        clock.now = 10.0  # the timed work: ten seconds
    energy = window.energy(tokens=100)
    assert energy.energy.coverage == "2 of 3 nodes measured"
    assert energy.line() == (
        "energy: 650.0 J over the window, 6.500 J per output token (2 of 3 nodes measured)"
    )
    assert energy.to_dict() == {
        "coverage": "2 of 3 nodes measured",
        "tokens": 100,
        "joules": 650.0,
        "joules_per_token": 6.5,
        "nodes": [
            {"node": "node1", "seconds": 10.0, "joules": 400.0, "watts": 40.0,
             "method": "energy counter", "sources": [PSYS], "problem": None},
            {"node": "node2", "seconds": 10.0, "joules": 250.0, "watts": 25.0,
             "method": "power samples", "sources": [GPU], "problem": None},
            {"node": "node3", "seconds": 10.0, "joules": None, "watts": None,
             "method": None, "sources": [], "problem": "no power source"},
        ],
        "watts": {"node1": [[5.0, 40.0]], "node2": [[0.0, 25.0], [10.0, 25.0]]},
    }  # fmt: skip
    # node3 was asked once (the probe), the others at the probe and at both ends
    assert sorted(calls) == ["node1"] * 3 + ["node2"] * 3 + ["node3"]
    assert sampler_threads() == []


def test_no_node_with_a_source_is_said_and_no_number_is_given() -> None:
    calls: list[str] = []
    clients = {name: node(name, lambda: Power(()), calls) for name in ("node1", "node2")}
    meter = Meter(list(clients), node_reader(clients), interval_s=0.01)
    with meter.window() as window:
        assert sampler_threads() == []  # nothing to sample: no thread at all
    energy = window.energy(tokens=64)
    assert energy.line() == "energy: no node has a power source (nothing measured)"
    assert energy.joules_per_token is None
    found = energy.to_dict()
    assert (found["coverage"], found["joules"], found["joules_per_token"]) == (
        "0 of 2 nodes measured",
        None,
        None,
    )
    assert [n["problem"] for n in found["nodes"]] == ["no power source"] * 2
    assert sorted(calls) == ["node1", "node2"]  # asked once each, at the probe


def test_a_node_that_does_not_answer_is_its_own_problem() -> None:
    clock, calls = Clock(), list[str]()
    clients = {"node1": node("node1", counter(clock), calls), "node2": node("node2", None, calls)}
    meter = Meter(list(clients), node_reader(clients), interval_s=3600, clock=clock)
    with meter.window() as window:
        clock.now = 2.0
    nodes = window.energy(tokens=10).to_dict()["nodes"]
    assert nodes[0]["joules"] == 80.0
    assert nodes[1]["problem"] == "no answer: node2: power failed: halo: error: broken"


def test_malformed_answer_is_that_nodes_problem() -> None:
    def run(args: tuple[str, ...]) -> Result:
        return Result(args, 0, '{"readings": [{"source": 1}], "warnings": []}', "")

    client = NodeClient(NodeConfig("n", "n", None, halo="/h/halo"), FakeRunner().on((), run))
    meter = Meter(["n"], node_reader({"n": client}))
    assert meter.probe() == {"n": "no answer: n: power: readings[0].source is not a string (got 1)"}


def test_the_sampler_reads_in_between_and_stops_with_the_window() -> None:
    clock, calls = Clock(), list[str]()
    clients = {"node1": node("node1", gauge(30.0), calls)}
    meter = Meter(list(clients), node_reader(clients), interval_s=0.01, clock=clock)
    meter.probe()
    with meter.window() as window:
        threading.Event().wait(0.2)  # ~20 readings by the sampler
        assert len(sampler_threads()) == 1
    assert sampler_threads() == []
    assert len(window.samples["node1"]) >= 4  # start, some in between, end


def test_an_error_in_the_window_stops_the_sampler_and_reads_no_end() -> None:
    clock, calls = Clock(), list[str]()
    clients = {"node1": node("node1", counter(clock), calls)}
    meter = Meter(list(clients), node_reader(clients), interval_s=0.01, clock=clock)
    meter.probe()
    with pytest.raises(KeyboardInterrupt), meter.window() as window:
        threading.Event().wait(0.05)
        raise KeyboardInterrupt
    assert sampler_threads() == [] and not window.finished
    assert window.energy(1).to_dict()["nodes"][0]["problem"] == (
        "the window did not end (interrupted)"
    )


def test_watts_from_a_counter_that_wraps() -> None:
    def at(t: float, joules: float) -> Sample:
        return Sample(t, (PowerReading(PSYS, "rapl", "psys", "energy", joules, 100.0),))

    assert watts_series([at(0, 90.0), at(1, 10.0), at(3, 50.0)], 0.0) == ((0.5, 20.0), (2.0, 20.0))
    unknown = Sample(1, (PowerReading(PSYS, "rapl", "psys", "energy", 10.0),))
    assert watts_series([at(0, 90.0), unknown], 0.0) == ()  # went down, range unknown
    assert watts_series([Sample(0, ())], 0.0) == ()


def test_measure_puts_each_levels_energy_in_the_result() -> None:
    calls: list[str] = []
    clients = {
        "node1": node("node1", counter(Clock()), calls),  # a counter that stands still
        "node2": node("node2", gauge(25.0), calls),
        "node3": node("node3", lambda: Power(()), calls),
    }
    meter = Meter(list(clients), node_reader(clients), interval_s=0.02)
    fake = FakeOpenAI("tiny", token_delay_s=0.01)
    with serving(fake) as port:
        run = measure(f"http://127.0.0.1:{port}", None, [1, 2], 4, 8, 6, None, meter=meter)
    assert sampler_threads() == []
    for level in run.levels:
        assert level.energy is not None
        found = level.to_dict()["energy"]
        assert (found["coverage"], found["tokens"]) == ("2 of 3 nodes measured", 24)
        methods = [(n["node"], n["method"], n["problem"]) for n in found["nodes"]]
        assert methods == [
            ("node1", "energy counter", None),
            ("node2", "power samples", None),
            ("node3", None, "no power source"),
        ]
        node2 = found["nodes"][1]
        # 25 W over the window, which holds the level's timed part
        assert node2["joules"] == pytest.approx(25.0 * node2["seconds"], abs=0.02)  # rounded s
        assert node2["seconds"] >= level.wall_s - 0.001
        assert found["joules"] == pytest.approx(node2["joules"], abs=0.01)  # node1 stood still
        assert found["joules_per_token"] == pytest.approx(found["joules"] / 24, abs=1e-4)
        assert found["watts"]["node2"][0] == [0.0, 25.0]
    assert calls.count("node3") == 1  # asked once, at the probe
