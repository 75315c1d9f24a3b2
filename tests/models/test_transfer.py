"""What crosses for a model sync (modelstore.transfer): each value read back from what the
other side wrote, and anything else one ModelError (or, for a hop's line, no event)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.errors import ModelError
from halo_cluster.modelstore.manifest import FileEntry, Manifest
from halo_cluster.modelstore.transfer import (
    HashAnswer,
    Held,
    ModelState,
    PipeDone,
    PipeEvent,
    PipeSpec,
    RouteHop,
    StreamFile,
    parse_hash_answer,
    parse_model_state,
    parse_pipe_event,
    parse_pipe_spec,
)

MANIFEST = Manifest("tiny", (FileEntry("config.json", 12, "a" * 64), FileEntry("w", 99, "b" * 64)))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def test_a_state_reads_back() -> None:
    state = ModelState(
        "tiny", "/s", "/s/tiny", MANIFEST, {"w": Held(99, "b" * 64)}, {"config.json": Held(4, None)}
    )
    assert parse_model_state(json.loads(json.dumps(state.to_dict()))) == state
    assert parse_model_state(state.to_dict()).complete


def test_a_hash_answer_reads_back() -> None:
    answer = HashAnswer(MANIFEST, {"w": "/src/w", "config.json": "/src/c"}, {"w": {10: "c" * 64}})
    assert parse_hash_answer(json.loads(json.dumps(answer.to_dict()))) == answer


@given(JSON)
def test_anything_is_a_hash_answer_or_one_modelerror(value: Any) -> None:
    document = (
        {**HashAnswer(MANIFEST, {}, {}).to_dict(), **value} if isinstance(value, dict) else value
    )
    try:
        parse_hash_answer(document)
    except ModelError as err:
        assert "\n" not in str(err)


def test_a_spec_reads_back_with_its_secrets_out_of_its_repr() -> None:
    spec = PipeSpec(
        "run1", "/s", True, MANIFEST, (StreamFile("w", 99, "b" * 64, 10),), {"w": 10},
        files={"w": "/src/w"}, route=(RouteHop("10.0.0.2", 4000, "s" * 64),),
    )  # fmt: skip
    assert parse_pipe_spec(spec.to_json()) == spec
    assert '"run": "run1"' in spec.to_json()  # how 'model-stop' finds a run's hops
    listening = PipeSpec("run1", "/s", True, MANIFEST, (), {}, listen="ssh", secret="t" * 64)
    assert parse_pipe_spec(listening.to_json()) == listening
    assert "t" * 64 not in repr(listening) and "s" * 64 not in repr(spec)


@pytest.mark.parametrize(
    "event",
    [
        PipeEvent("listening", address="10.0.0.2", port=4000),
        PipeEvent("progress", received=5, written=3, total=9, seconds=0.5),
        PipeEvent("file", path="w", verified=False, reason="disk full"),
        PipeEvent("done", done=PipeDone(("w",), {}, None, True, None, True, 9, 9, 1.5)),
        PipeEvent("done", done=PipeDone((), {}, None, True, None, None, 9, 0, 1.5, 0.25)),
    ],
)
def test_an_event_reads_back(event: PipeEvent) -> None:
    assert parse_pipe_event(json.dumps(event.to_dict())) == event


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "not a JSON object"),
        ({"name": 3}, "model-state name: not a string"),
        ({"name": "m", "files": {"w": {"size": -1}}}, "size: not a whole number"),
        ({"name": "m", "manifest": {"files": 3}}, "manifest"),
    ],
)
def test_a_bad_state_is_one_line(value: Any, message: str) -> None:
    with pytest.raises(ModelError, match=message) as err:
        parse_model_state(value)
    assert "\n" not in str(err.value)


@given(JSON)
def test_anything_is_a_state_or_one_modelerror(value: Any) -> None:
    try:
        parse_model_state(value)
    except ModelError as err:
        assert "\n" not in str(err)


@given(JSON)
def test_anything_is_a_spec_or_one_modelerror(value: Any) -> None:
    try:
        parse_pipe_spec(json.dumps(value))
    except ModelError as err:
        assert "\n" not in str(err)


@given(st.text(max_size=200) | JSON.map(json.dumps))
def test_any_line_is_an_event_or_none(line: str) -> None:
    found = parse_pipe_event(line)
    assert found is None or isinstance(found, PipeEvent)


def test_a_sync_tells_its_rates_and_cpu_per_gb_and_none_where_nothing_was_measured() -> None:
    from halo_cluster.models.sync import NodeSync, SyncResult

    node = NodeSync("n2", "synced", received=2_000_000_000, seconds=4.0, cpu_s=3.0)
    assert (node.to_dict()["mb_s"], node.to_dict()["cpu_s_per_gb"]) == (500.0, 1.5)
    same = NodeSync("n3", "same").to_dict()  # nothing crossed: no rate, no cost
    assert (same["mb_s"], same["cpu_s"], same["cpu_s_per_gb"]) == (None, None, None)
    manifest = Manifest("m", (FileEntry("w", 1, "0" * 64),), "", "/m")
    result = SyncResult("m", manifest, "here", {"n2": node}, seconds=2.0, sent=1_000_000_000)
    result.controller_cpu_s = 0.5
    told = result.to_dict()
    assert told["mb_s"] == 500.0
    assert told["cpu_s_per_gb"] == {"controller": 0.5, "source": None}
