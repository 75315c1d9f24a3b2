"""Which nodes each replica gets and on which port: named groups, an even split, the free
nodes, and every refusal one line that says what to do."""

from __future__ import annotations

import pytest

from halo_cluster.cluster.deployments import Deployment, Replica
from halo_cluster.deploy.groups import free_groups, parse_groups, place
from halo_cluster.errors import UsageError

pytestmark = pytest.mark.unit
NODES = ["a", "b", "c", "d"]


def deployment(name: str, *groups: tuple[tuple[str, ...], int]) -> Deployment:
    replicas = tuple(Replica(i, nodes, port) for i, (nodes, port) in enumerate(groups))
    return Deployment(name, "m", "llama.cpp", "llama.cpp single", replicas)


@pytest.mark.parametrize(
    ("text", "replicas", "groups"),
    [
        ("a+b,c+d", None, [("a", "b"), ("c", "d")]),
        ("a+b,c+d", 2, [("a", "b"), ("c", "d")]),
        ("a,b,c,d", 2, [("a", "b"), ("c", "d")]),
        ("a,b", None, [("a", "b")]),
        ("c", None, [("c",)]),
        (" a , b ", 2, [("a",), ("b",)]),
    ],
)
def test_the_groups_nodes_names(
    text: str, replicas: int | None, groups: list[tuple[str, ...]]
) -> None:
    assert parse_groups(text, NODES, replicas) == groups


@pytest.mark.parametrize(
    ("text", "replicas", "said"),
    [
        ("a,x", None, "no node named 'x' (nodes: a, b, c, d)"),
        ("a,a", None, "a appears twice: replicas run on disjoint nodes"),
        ("a+b,c", None, "every replica's group has as many nodes"),
        ("a+b,c+d", 3, "--nodes names 2 group(s) but --replicas is 3"),
        ("a,b,c", 2, "3 node(s) do not split into 2 equal replicas"),
        ("a,,b", None, "give node names"),
        ("", None, "give node names"),
    ],
)
def test_a_bad_nodes_is_one_line(text: str, replicas: int | None, said: str) -> None:
    with pytest.raises(UsageError, match=said.replace("(", r"\(").replace(")", r"\)")):
        parse_groups(text, NODES, replicas)


def test_free_groups_leave_out_other_deployments_nodes() -> None:
    other = deployment("big", (("a", "b"), 8000))
    assert free_groups(NODES, [other], 1, 2) == [("c",), ("d",)]
    with pytest.raises(UsageError) as err:
        free_groups(NODES, [other], 2, 2)
    assert str(err.value) == (
        "2 replica(s) of 2 node(s) need 4 free nodes; 2 are free (in use by other "
        "deployments: a, b): name the nodes with --nodes to share them, or stop a deployment"
    )


def test_a_replica_sharing_a_node_gets_the_next_free_port() -> None:
    other = deployment("big", (("a", "b"), 8000), (("c",), 8001))
    placed = place([("b",), ("c",), ("d",)], [other], 8000)
    assert placed == (
        Replica(0, ("b",), 8001),
        Replica(1, ("c",), 8000),
        Replica(2, ("d",), 8000),
    )
    assert placed[0].url("10.0.0.2") == "http://10.0.0.2:8001"
    assert placed[0].url("fd00::2") == "http://[fd00::2]:8001"
    assert placed[0].unit("lab", "small") == "lab.small.0"


def test_what_other_deployments_hold_on_a_node_adds_up() -> None:
    from halo_cluster.cluster.deployments import held_gib

    big = Deployment(
        "big", "m", "vllm", "vllm TP2",
        (Replica(0, ("a", "b"), 8000, (("a", 40.0), ("b", 38.5))),),
    )  # fmt: skip
    small = Deployment(
        "small", "m", "llama.cpp", "llama.cpp single",
        (Replica(0, ("a",), 8001, (("a", 6.0),)), Replica(1, ("c",), 8000, (("c", 6.0),))),
    )  # fmt: skip
    assert held_gib([big, small], ("a", "c")) == {"a": 46.0, "c": 6.0}
    assert held_gib([big], ("d",)) == {}
