"""The bench driver's start-up, with real torch.distributed (Gloo) in one process per rank
and a stand-in for Ray (tests/bench/fake_ray.py): each rank says when it joined and when its
init is done; a rank that cannot reach the first node's store is named with its node (issue
29: "DistStoreError: … 1/2 clients joined" named no node)."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import pytest

from halo_cluster.bench import driver
from halo_cluster.bench.driver import Ranks, init_failed, not_joined, run_sweep
from halo_cluster.errors import DriverError

pytest.importorskip("torch")
from tests.bench import fake_ray

NODES = ["node1", "node2"]


def spec(timeout: float) -> dict[str, Any]:
    return {
        "nodes": [{"name": n, "address": "127.0.0.1"} for n in NODES],
        "backend": "auto",
        "timeout": timeout,
        "run_id": "t",
        "kind": "collective",
        "sizes": [8, 4096],
        "iters": 3,
        "warmup": 1,
    }


@pytest.fixture
def loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gloo on the loopback interface (the actors inherit it); no ping from the tests."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setattr(driver, "_unreachable", lambda _addresses: [])


@pytest.fixture
def actors() -> Iterator[list[fake_ray.Actor]]:
    made: list[fake_ray.Actor] = []
    yield made
    for actor in made:
        fake_ray.kill(actor)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # nothing listens there once it is closed


def progress(events: list[dict[str, Any]]) -> list[str]:
    return [str(e["message"]) for e in events if e.get("event") == "progress"]


def test_each_rank_says_it_joined_and_its_init_is_done(
    loopback: None, actors: list[fake_ray.Actor]
) -> None:
    events: list[dict[str, Any]] = []
    actors += [fake_ray.Actor(), fake_ray.Actor()]
    ranks = Ranks(spec(60), events.append, fake_ray, actors, NODES)
    facts, backend = ranks.start()
    said = progress(events)
    assert (backend, said[0], sorted(said[1:])) == (
        "gloo",
        "2 ranks, gloo init",
        [
            "rank 0 on node1: init done",
            "rank 0 on node1: joined",
            "rank 1 on node2: init done",
            "rank 1 on node2: joined",
        ],
    )
    assert [m.endswith("joined") for m in said[1:]] == [True, True, False, False]
    rows = run_sweep(ranks, spec(60), events.append)
    assert [row["bytes"] for row in rows] == [8, 4096] and len(facts) == 2
    ranks.close(graceful=True)


def test_a_rank_that_cannot_reach_the_store_is_named_with_its_node(
    loopback: None, actors: list[fake_ray.Actor], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver, "_unreachable", lambda _addresses: ["node2 (192.0.2.2)"])
    events: list[dict[str, Any]] = []
    actors += [fake_ray.Actor(), fake_ray.Actor(join_port=closed_port())]
    ranks = Ranks(spec(3), events.append, fake_ray, actors, NODES)
    start = time.monotonic()
    with pytest.raises(DriverError) as raised:
        ranks.start()
    took = time.monotonic() - start
    message = str(raised.value)
    pattern = (
        r"process group init: node2 did not join the store on node1 \(127\.0\.0\.1:\d+\): "
        r"rank 1: \w+: [^;\n]+; node2 \(192\.0\.2\.2\) does not answer on the fabric"
    )
    assert re.fullmatch(pattern, message), message
    assert "rank 0" not in message and "clients joined" not in message
    assert progress(events) == ["2 ranks, gloo init", "rank 0 on node1: joined"]
    assert took < 3 + 30  # its timeout (torch's own), with the start of two processes


def test_a_rank_without_an_answer_is_named_too() -> None:
    answered: futures.Future[str] = futures.Future()
    answered.set_result("node1")
    silent: futures.Future[str] = futures.Future()  # never answers
    events: list[dict[str, Any]] = []
    ranks = Ranks(spec(1), events.append, fake_ray, [object(), object()], NODES)
    failed = ranks.each([answered, silent], 0.2, lambda r: f"rank {r}: joined")
    assert (failed, progress(events)) == ({1: "no answer within 0.2 s"}, ["rank 0: joined"])


@pytest.mark.parametrize(
    ("nodes", "failed", "lost", "joined", "formed"),
    [
        (
            ["node1", "node2"],
            {1: "DistNetworkError: timed out"},
            [],
            "process group init: node2 did not join the store on node1 (10.0.0.1:5000): "
            "rank 1: DistNetworkError: timed out",
            "process group init failed on node2: rank 1: DistNetworkError: timed out",
        ),
        (
            ["node1", "node1", "node2", "node2", "node3"],
            {2: "a", 3: "b", 4: "no answer within 40 s"},
            ["node3 (10.0.0.3)"],
            "process group init: node2, node3 did not join the store on node1 (10.0.0.1:5000): "
            "rank 2: a; rank 3: b; rank 4: no answer within 40 s; "
            "node3 (10.0.0.3) does not answer on the fabric",
            "process group init failed on node2, node3: rank 2: a; rank 3: b; "
            "rank 4: no answer within 40 s; node3 (10.0.0.3) does not answer on the fabric",
        ),
        (
            ["node1", "node2"],
            {0: "DistNetworkError: address in use", 1: "no answer within 40 s"},
            [],
            "process group init: the store on node1 (10.0.0.1:5000) did not start "
            "(rank 0: DistNetworkError: address in use; rank 1: no answer within 40 s)",
            "process group init failed on node1, node2: rank 0: DistNetworkError: address in "
            "use; rank 1: no answer within 40 s",
        ),
    ],
)
def test_the_errors_name_the_nodes(
    nodes: list[str], failed: dict[int, str], lost: list[str], joined: str, formed: str
) -> None:
    assert not_joined(nodes, failed, "10.0.0.1:5000", lost) == joined
    assert init_failed(nodes, failed, lost) == formed
