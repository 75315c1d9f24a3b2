"""The supervisor's spec (wire.supervise): what the controller writes reads back the same on
the head, the API key stays out of every repr, and anything else is one WireError."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.errors import WireError
from halo_cluster.supervision import SuperviseSettings
from halo_cluster.wire.recheck import LlamaRecheck, RpcWorker, VllmRecheck, parse_recheck
from halo_cluster.wire.supervise import Member, Spec, SshTarget, Step, parse_spec

SPEC = Spec(
    cluster="lab", head="node1", engine="vllm", model="tiny", host="0.0.0.0", port=8000,
    api_key="k" * 40, rdma=False, allow_fallback=False, settings=SuperviseSettings(),
    members=(
        Member("node1", None, (), None, ("python3", "-", "counters"), True, None),
        Member("node2", SshTarget("10.0.0.2", "halo", 2222), ("toolbox", "run"), "10.1.0.2",
               None, True, "10.1.0.2"),
    ),
    start=(Step("node2", ("bash", "-s"), "export VLLM_API_KEY=" + "k" * 40, 60.0),),
    probe_script="p", stop_script="s", log_tail_script="t", log_script="l",
    recheck=VllmRecheck((("node1", "10.1.0.1"), ("node2", None)), "10.1.0.1",
                        (("node1", "10.1.0.1"),), "socket"),
    ray_wait=("ray-nodes", "--wait"),
)  # fmt: skip


def test_the_spec_reads_back_as_it_was_written() -> None:
    assert parse_spec(json.loads(SPEC.to_json())) == SPEC
    assert [m.name for m in SPEC.counted] == ["node1"]


def test_a_recheck_reads_back_as_it_was_written() -> None:
    llama = LlamaRecheck("node1", (RpcWorker("node2:serve.log", "10.1.0.2:50052", "tcp"),), 2)
    for recheck in (SPEC.recheck, llama):
        assert recheck is not None and parse_recheck(recheck.to_dict()) == recheck
    assert [w.node for w in llama.workers] == ["node2"]


@given(st.dictionaries(st.text(max_size=6), st.none() | st.integers() | st.text(max_size=4)))
def test_a_malformed_recheck_is_one_wire_error(value: dict[str, Any]) -> None:
    for kind in ("vllm", "llama.cpp-rpc", "other"):
        try:
            parse_recheck({**value, "kind": kind})
        except WireError as err:
            assert "\n" not in str(err)


def test_the_api_key_is_in_no_repr() -> None:
    assert "k" * 40 not in repr(SPEC)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=10,
)


@given(JSON)
def test_anything_else_is_one_wire_error(value: Any) -> None:
    document = {**SPEC.to_dict(), **value} if isinstance(value, dict) else value
    try:
        parse_spec(document)
    except WireError as err:
        assert "\n" not in str(err)


def test_the_state_file_reads_back_as_it_was_written() -> None:
    from halo_cluster.wire.supervise import Change, LastProbe, SupervisorState, parse_state

    state = SupervisorState(
        "lab", "vllm", "tiny", 4242, SuperviseSettings(), "serving", since=1.0, started_at=1.0,
        serving_since=2.0, restarts=1, attempts=2, cause=None,
        last_probe=LastProbe(3.0, True, True, 0.01, None),
        nodes={"node1": {"reachable": True}}, history=[Change(1.0, "serving", None)],
        proof={"problems": []},
    )  # fmt: skip
    assert parse_state(json.loads(json.dumps(state.to_dict()))) == state


@given(JSON)
def test_any_other_state_is_one_wire_error(value: Any) -> None:
    from halo_cluster.wire.supervise import parse_state

    try:
        parse_state(
            {"version": 1, "cluster": "c", "state": "serving", **value}
            if isinstance(value, dict)
            else value
        )
    except WireError as err:
        assert "\n" not in str(err)
