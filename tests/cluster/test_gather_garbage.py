"""A node that answers with garbage or inventory JSON of the wrong shape becomes an
unreachable/unreadable report naming it, in one line; the other nodes are still read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from halo_cluster.client.node import clients_from
from halo_cluster.cluster.gather import gather
from halo_cluster.config import Config, NodeConfig
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.result import Result
from tests.conftest import ROOTS

GOOD = json.dumps(collect_inventory(str(ROOTS / "no-rdma")).to_dict())
NODES = (NodeConfig("a", "a", None, halo="h"), NodeConfig("b", "b", None, halo="h"))


@pytest.mark.parametrize(
    "garbage",
    [
        "[1, 2, 3]",
        '{"schema": "halo.inventory/1", "rdma": "x"}',
        '{"net": [[]]}',
        "not json \x1b[31m\n" * 3,
        "[" * 50_000,
        json.dumps({"schema": "halo.inventory/1", "hostname": {"a": [1]}}),
    ],
)
def test_garbage_from_one_node(tmp_path: Path, garbage: str) -> None:
    config = Config(tmp_path / "halo.toml", "c", "auto", NODES)
    bad = FakeRunner().on(["h", "inventory"], Result((), 0, garbage, ""))
    good = FakeRunner().on(["h", "inventory"], Result((), 0, GOOD, ""))
    reports = gather(config, clients_from(config, {"a": bad, "b": good}))
    assert reports[0].inventory is None and reports[1].inventory is not None
    error = reports[0].error or ""
    assert error.startswith("a: unreadable inventory from h (") and "\n" not in error
    assert "\x1b" not in error
