"""The models on the nodes' stores, as the controller reads them (models/stores.py): every
node's answer read back by its one parser, so one node's malformed answer is that node's
error and the others' answers stand; the table of copies across nodes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from halo_cluster.client.node import clients_from
from halo_cluster.cluster.handle import Cluster
from halo_cluster.config import Config, NodeConfig
from halo_cluster.errors import ModelError
from halo_cluster.models import stores
from halo_cluster.modelstore.answers import Listing, StoredModel
from halo_cluster.runner.result import Result

NODES = tuple(NodeConfig(f"n{i}", f"root@n{i}", f"10.1.0.{i}") for i in (1, 2, 3))
TINY = StoredModel("tiny", "/s/tiny", True, "d" * 64, 99, 2, "/src/tiny", None, ())


class Answers:
    """A node whose node-side commands print ``stdout``."""

    def __init__(self, stdout: str) -> None:
        self.stdout = stdout

    def run(self, argv: Any, stdin: Any = None, timeout: float = 30.0, on_line: Any = None) -> Result:
        return Result(tuple(argv), 0, self.stdout, "")


def cluster(tmp_path: Path, answers: dict[str, Any]) -> Cluster:
    config = Config(tmp_path / "halo.toml", "c", "auto", NODES)
    answers = {n.name: listing() for n in NODES} | answers
    runners = {n: Answers(a if isinstance(a, str) else json.dumps(a)) for n, a in answers.items()}
    return Cluster(config, clients_from(config, runners))  # type: ignore[arg-type]


def listing(*models: StoredModel) -> dict[str, Any]:
    return Listing("/s", models).to_dict()


@pytest.mark.parametrize(
    "bad",
    [
        {"models": [{"name": 3}]},
        {"models": "x"},
        {"models": [{"name": "tiny", "path": "/s/tiny", "size": -1}]},
        [1, 2],
        "{not json",
    ],
)
def test_one_nodes_bad_listing_is_its_own_and_the_others_stand(tmp_path: Path, bad: Any) -> None:
    found = stores.store_listing(
        cluster(tmp_path, {"n1": listing(TINY), "n2": bad, "n3": listing(TINY)}), ["n1", "n2", "n3"]
    )
    assert found["n1"] == found["n3"] == Listing("/s", (TINY,))
    assert isinstance(found["n2"], stores.Unreadable) and found["n2"].error.startswith("n2")
    assert "\n" not in found["n2"].error
    [row] = stores.model_table(found)
    assert {n: c.state for n, c in row.nodes.items()} == {
        "n1": "same", "n2": "unreachable", "n3": "same",
    }  # fmt: skip


def test_the_table_names_each_copy(tmp_path: Path) -> None:
    other = StoredModel("tiny", "/s/tiny", True, "e" * 64, 99, 2, "/src/tiny", None, ())
    changed = StoredModel("tiny", "/s/tiny", True, "d" * 64, 99, 2, "/src/tiny", None, ("w",))
    found = stores.store_listing(
        cluster(tmp_path, {"n1": listing(TINY), "n2": listing(other), "n3": listing(changed)}),
        ["n1", "n2", "n3"],
    )
    [row] = [r.to_dict() for r in stores.model_table(found)]
    assert row == {
        "name": "tiny",
        "nodes": {
            "n1": {"complete": True, "digest": "d" * 64, "files": 2, "changed": [], "state": "same"},
            "n2": {"complete": True, "digest": "e" * 64, "files": 2, "changed": [],
                   "state": "different"},
            "n3": {"complete": True, "digest": "d" * 64, "files": 2, "changed": ["w"],
                   "state": "changed"},
        },
        "size": 99, "source": "/src/tiny", "digest": "d" * 64,
    }  # fmt: skip


def test_verify_and_rm_read_each_answer_or_name_the_node(tmp_path: Path) -> None:
    good = {"name": "tiny", "digest": "d" * 64, "files": 2, "differ": [{"path": "w", "reason": "x"}]}
    found = stores.verify(cluster(tmp_path, {"n1": good, "n2": {"differ": 3}}), "tiny", ["n1", "n2"])
    assert [d.path for d in found["n1"].differ] == ["w"]  # type: ignore[union-attr]
    assert isinstance(found["n2"], stores.Unreadable) and "model-verify" in found["n2"].error
    gone = stores.remove(
        cluster(tmp_path, {"n1": {"name": "tiny", "removed": True}, "n2": {"removed": "yes"}}),
        "tiny", ["n1", "n2"],
    )  # fmt: skip
    assert gone["n1"] == stores.Removed("tiny", True) and isinstance(gone["n2"], stores.Unreadable)


def test_serving_by_name_refuses_a_node_whose_store_cannot_be_read(tmp_path: Path) -> None:
    found = cluster(tmp_path, {"n1": listing(TINY), "n2": {"models": 7}, "n3": listing(TINY)})
    with pytest.raises(ModelError, match=r"^n2: cannot read its model store: n2: an answer"):
        stores.resolve(found, "tiny", ["n1", "n2"])
    assert stores.resolve(found, "tiny", ["n1", "n3"]) == stores.Resolved(
        "tiny", "/s/tiny", "d" * 64, "/src/tiny"
    )


def test_one_nodes_bad_model_state_is_its_own_in_a_sync(tmp_path: Path) -> None:
    """halo model sync: a node whose model-state answer halo cannot read is that node's
    (unreachable, the reason named), the nodes that hold the model are the same."""
    from halo_cluster.models.source import Source
    from halo_cluster.models.sync import Sync
    from halo_cluster.modelstore.manifest import FileEntry, Manifest
    from halo_cluster.modelstore.transfer import Held, ModelState

    manifest = Manifest("tiny", (FileEntry("w", 3, "a" * 64),), source="/src/tiny")
    held = ModelState("tiny", "/s", "/s/tiny", manifest, {"w": Held(3, "a" * 64)}, {})
    found = cluster(tmp_path, {"n1": held.to_dict(), "n2": {"name": 7}, "n3": held.to_dict()})
    source = Source("/src/tiny", None, "/src/tiny", {"w": "/src/tiny/w"}, manifest)
    result = Sync(found, source, ["n1", "n2", "n3"]).run()
    statuses = {n: (s.status, s.reason) for n, s in result.nodes.items()}
    assert statuses["n1"][0] == statuses["n3"][0] == "same"
    assert statuses["n2"][0] == "unreachable"
    assert statuses["n2"][1].startswith("n2: model-state: model-state name: not a string")
