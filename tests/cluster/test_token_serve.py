"""The token witness in 'halo serve', through scripted nodes: a one-node start recorded as the
reference (the file it leaves, no secret in it), a two-node layout compared with it (the
short form: two prompts), a layout whose answers moved stopped with the layout and the
position named, a reference asked of two nodes refused before anything starts, and a
reference file halo cannot read as one line."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from halo_cluster.config import ServeConfig
from halo_cluster.errors import StateError, UsageError
from halo_cluster.serving.reference import PROMPTS, reference_path
from tests.cluster.test_serve import ANSWER, VLLM, Node, cluster, serve, vllm_table

SERVE = ServeConfig(model="/m", api_key_env="HALO_TEST_KEY", sections=vllm_table(executor="mp"))


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALO_TEST_KEY", "k-secret")


def two_nodes() -> dict[str, Node]:
    logs = [(VLLM / f"mp-tp2-node{i}.log").read_text() for i in (1, 2)]
    return {"node1": Node(logs[0], (24_000, 40, None)), "node2": Node(logs[1], (24_000, 9, None))}


def record(tmp_path: Path, nodes: dict[str, Node]) -> None:
    srv = cluster(tmp_path, nodes, SERVE)
    result = serve(srv, tp=1, nodes=1, reference="record", wait_s=5)
    assert result.tokens == {"recorded": "vllm tp1 on node1", "prompts": 4, "tokens": 32}
    assert (result.proven, result.stopped) == ("one node", False)
    srv.stop()


def test_a_one_node_start_is_recorded_as_the_reference(tmp_path: Path) -> None:
    nodes = two_nodes()
    record(tmp_path, nodes)
    asked = next(s for s in nodes["node1"].scripts if "serve-tokens" in s)
    assert "--tokens 32 --top 5" in asked and asked.count("--prompt=") == 4
    assert "k-secret" not in asked.split("HALO_SERVE_KEY", 1)[-1].split("\n", 1)[1]
    text = reference_path(srv_config(tmp_path)).read_text()
    saved = json.loads(text)
    assert saved["schema"] == "halo.tokens/1" and "k-secret" not in text
    entry = saved["references"]["vllm /m"]
    assert (entry["layout"], entry["node"], entry["prompts"]) == (
        "vllm tp1 on node1",
        "node1",
        list(PROMPTS),
    )
    assert entry["answers"] == [ANSWER] * 4


def srv_config(tmp_path: Path):  # type: ignore[no-untyped-def]
    return cluster(tmp_path, two_nodes(), SERVE).config


def test_a_two_node_layout_with_the_same_tokens_is_proven(tmp_path: Path) -> None:
    record(tmp_path, two_nodes())
    nodes = two_nodes()
    srv = cluster(tmp_path, nodes, SERVE)
    result = serve(srv, tp=2, wait_s=5)
    assert (result.proven, result.problems, result.stopped) == ("socket", [], False)
    assert result.layout == "vllm tp2 on node1+node2"
    assert (result.tokens["ok"], result.tokens["agreement"], len(result.tokens["prompts"])) == (
        True,
        1.0,
        2,
    )
    assert result.tokens["reference"] == "vllm tp1 on node1"
    asked = next(s for s in nodes["node1"].scripts if "serve-tokens" in s)
    assert asked.count("--prompt=") == 2  # the short form


def test_other_tokens_stop_the_server_naming_the_layout_and_the_position(
    tmp_path: Path,
) -> None:
    """Both transport witnesses pass; the tokens do not: the server is stopped anyway,
    --allow-fallback or not."""
    record(tmp_path, two_nodes())
    nodes = two_nodes()
    moved = copy.deepcopy(ANSWER)
    moved["steps"][1] = {"token": "7", "id": None, "logprob": -2.0, "top": [["7", -2.0]]}
    nodes["node1"].answer = moved
    srv = cluster(tmp_path, nodes, SERVE)
    result = serve(srv, tp=2, wait_s=5, allow_fallback=True)
    assert (result.stopped, result.proven) == (True, None)
    assert not nodes["node1"].running and not nodes["node2"].running
    assert result.problems == [
        f"vllm tp2 on node1+node2: prompt {i} differs from the one-node reference "
        "(vllm tp1 on node1) at token 1: '486' in the reference, '7' here; not a near tie: "
        "the two tokens were beyond the likeliest tokens (tolerance 0.1)"
        for i in (1, 2)
    ]
    assert result.engine["backend"] == "gloo" and not result.traffic["problems"]


def test_no_reference_yet_is_said_and_passes(tmp_path: Path) -> None:
    nodes = two_nodes()
    result = serve(cluster(tmp_path, nodes, SERVE), tp=2, wait_s=5)
    assert (result.tokens, result.stopped) == ({"reference": None}, False)
    assert not any("serve-tokens" in s for s in nodes["node1"].scripts)


def test_a_reference_is_recorded_on_one_node_only(tmp_path: Path) -> None:
    nodes = two_nodes()
    srv = cluster(tmp_path, nodes, SERVE)
    with pytest.raises(UsageError, match=r"recorded on one node, not on vllm tp2 on node1\+node2"):
        serve(srv, tp=2, reference="record", wait_s=5)
    assert not any("setsid" in s for n in nodes.values() for s in n.scripts)


def test_a_reference_file_halo_cannot_read_is_one_line(tmp_path: Path) -> None:
    nodes = two_nodes()
    srv = cluster(tmp_path, nodes, SERVE)
    path = reference_path(srv.config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"schema": "halo.tokens/1", "references": {"vllm /m": {"engine": 1}}}')
    with pytest.raises(StateError, match=r"not a halo.tokens/1 file halo can read .*record"):
        serve(srv, tp=2, wait_s=5)
    assert not any("setsid" in s for n in nodes.values() for s in n.scripts)


def test_the_token_witness_in_one_line() -> None:
    from halo_cluster.cli.serve import tokens_line

    assert tokens_line({"skipped": "off"}) == "tokens: not compared (--reference off)"
    assert tokens_line({"reference": None}) == (
        "tokens: no one-node reference for this engine and model yet "
        "(record one: halo serve MODEL --nodes 1 --reference record)"
    )
    assert tokens_line({"recorded": "vllm tp1 on node1", "prompts": 4, "tokens": 32}) == (
        "tokens: recorded vllm tp1 on node1's greedy answers to 4 prompts (32 tokens each) "
        "as the one-node reference"
    )
    same = {
        "ok": True,
        "reference": "vllm tp1 on node1",
        "prompts": [{}, {}],
        "problems": [],
        "drift_nats": 0.0078,
        "near_ties": 1,
        "tolerance_nats": 0.1,
    }
    assert tokens_line(same) == (
        "tokens: the same as the one-node reference (vllm tp1 on node1) on 2 prompt(s), "
        "log-probabilities within 0.0078 nats, 1 parted at a near tie (tolerance 0.1 nats)"
    )
    other = {**same, "ok": False, "problems": ["x"]}
    assert tokens_line(other) == (
        "tokens: DIFFERENT from the one-node reference (vllm tp1 on node1) on 1 of 2 prompt(s)"
    )
