"""#9: a node's inventory with a wrong type inside (``net[].mtu: "abc"``, ``ipv4:
"1.2.3.4/24"``) crashed the whole doctor (and ``up``). Now every field is read as the type its
dataclass declares (facts/model.py ``inventory_from_dict``): such a node is one unreadable
inventory, naming the field, and the other nodes are checked as usual."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from halo_cluster.client.node import clients_from
from halo_cluster.cluster.doctor import doctor_cluster
from halo_cluster.cluster.gather import gather
from halo_cluster.cluster.plans import blocking, plan_nodes
from halo_cluster.errors import HaloError
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.model import inventory_from_dict
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.result import Result
from tests.checks.test_cluster_checks import STRIX1, STRIX2, config, node_inv
from tests.conftest import ROOTS, SCENARIOS, ping_answer, strix_peer

HEALTHY = node_inv("strix-e810")
GOOD = json.loads(json.dumps(HEALTHY.to_dict()))
PEER = strix_peer(HEALTHY)


def node(answer: str) -> FakeRunner:
    runner = FakeRunner().on(["halo", "inventory"], Result((), 0, answer, ""))
    return runner.on_input(["bash", "-s"], ping_answer())


def peer() -> FakeRunner:
    return node(json.dumps(PEER.to_dict()))


def with_value(where: tuple[Any, ...], value: Any, delete: bool = False) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    parent = data
    for step in where[:-1]:
        parent = parent[step]
    if delete:
        del parent[where[-1]]
    else:
        parent[where[-1]] = value
    return data


@pytest.mark.parametrize(
    ("where", "value", "reason"),
    [
        (("net", 0, "mtu"), "abc", "net[0].mtu is 'abc', not an integer"),
        (("net", 0, "ipv4"), "1.2.3.4/24", "net[0].ipv4 is '1.2.3.4/24', not a list"),
        (("net", 0, "ipv4"), ["x"], "net[0].ipv4[0] is 'x', not an address/prefix"),
        (
            ("rdma", 0, "ports", 0, "rate_gbps"),
            "25",
            "rdma[0].ports[0].rate_gbps is '25', not a number",
        ),
        (
            ("memory", "total_kib"),
            2**70,
            "number 1180591620717411303424... (22 digits) is out of range",  # as the answer is parsed,
        ),
        (("devices", "kfd"), 1, "devices.kfd is 1, not true or false"),
        (("pci",), [], "pci is a list, not an object"),
    ],
)
def test_a_wrong_type_is_one_unreadable_inventory_and_the_other_node_is_checked(
    where: tuple[Any, ...], value: Any, reason: str
) -> None:
    answer = json.dumps(with_value(where, value))
    cfg = config(STRIX1, STRIX2)
    report = doctor_cluster(cfg, clients_from(cfg, {"strix1": node(answer), "strix2": peer()}))
    reach = [f for f in report.cluster if f.check == "cluster.reachable"]
    assert [(f.severity, f.summary) for f in reach] == [("fail", "strix1 did not answer")]
    assert (
        reach[0]
        .evidence[0]
        .startswith(
            f"root@192.168.1.51: unreadable inventory from {STRIX1.runs} ({reason}; got '{{"
        )
    )
    assert report.nodes["strix1"] == [] and report.nodes["strix2"]  # the other one checked


def test_every_fixture_root_reads_back_as_it_was() -> None:
    for scenario in SCENARIOS:
        inv = collect_inventory(str(ROOTS / scenario))
        assert inventory_from_dict(json.loads(json.dumps(inv.to_dict()))) == inv, scenario
    newer = {**GOOD, "a_field_of_a_newer_halo": [1]}  # left out, not refused
    assert inventory_from_dict(newer) == HEALTHY


def places(data: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield (*at, key)
            yield from places(value, (*at, key))
    elif isinstance(data, list) and data:
        yield (*at, 0)
        yield from places(data[0], (*at, 0))


WRONG: tuple[Any, ...] = ("x", None, {}, [], True, -1, "1.2.3.4/24")


def test_any_value_anywhere_is_checked_or_one_unreadable_inventory() -> None:
    """Every field of a healthy node given each wrong value (or taken away): doctor, the
    blocking checks and the plans of ``up`` run to the end; the node is read or named."""
    cfg = config(STRIX1, STRIX2)
    unreadable = 0
    variants = [
        (where, value, delete)
        for where in places(GOOD)
        for value, delete in [*((v, False) for v in WRONG), (None, True)]
    ]
    for where, value, delete in variants:
        answer = json.dumps(with_value(where, value, delete))
        clients = clients_from(cfg, {"strix1": node(answer), "strix2": peer()})
        report = doctor_cluster(cfg, clients)
        reports = gather(cfg, clients)
        blocking(cfg, reports)
        with contextlib.suppress(HaloError):  # a plan refused in one line, as up shows it
            plan_nodes(cfg, reports)
        if reports[0].inventory is None:
            unreadable += 1
            assert "unreadable inventory" in (reports[0].error or ""), where
            assert "\n" not in (reports[0].error or "")
        assert report.nodes["strix2"], where
    assert len(variants) > 1000 and 0 < unreadable < len(variants)
