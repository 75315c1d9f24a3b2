"""The supervisor's policy (pure): which round of probes leads to which action, the backoff,
the crash loop ending after exactly K restarts, the memory guard, the probe script's answer."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster import supervision as sv

SETTINGS = sv.SuperviseSettings(backoff_s=2.0, backoff_max_s=10.0, crash_restarts=3)


def member(name: str = "node2", **kw: object) -> sv.MemberProbe:
    return sv.MemberProbe(name, kw.pop("reachable", True), **kw)  # type: ignore[arg-type]


def probe(at: float = 100.0, *members: sv.MemberProbe, health: bool = True, gen: bool = True,
          detail: str = "") -> sv.Probe:  # fmt: skip
    return sv.Probe(at, members or (member("node1"), member()), health, gen, 0.01, detail)


def test_a_healthy_round_does_nothing() -> None:
    assert sv.Policy(SETTINGS).decide(sv.SERVING, probe()) == sv.Action(sv.NOTHING)


def test_a_dead_process_restarts_at_once() -> None:
    policy = sv.Policy(SETTINGS)
    action = policy.decide(sv.SERVING, probe(100.0, member("node1"), member(alive=False)))
    assert action == sv.Action(
        sv.RESTART, "the engine's process exited on node2", wait_s=0.0, nodes=()
    )
    assert policy.restarts_at == [100.0]


def test_garbage_behind_a_green_health_check_restarts_at_once() -> None:
    policy = sv.Policy(SETTINGS)
    said = "prompt 1 differs from the one-node reference (vllm tp1 on node1) at token 0"
    garbage = replace(probe(), garbage=said)
    assert policy.decide(sv.SERVING, garbage) == sv.Action(sv.RESTART, f"garbage: {said}")
    lost = replace(garbage, members=(member("node1"), member(reachable=False)))
    assert policy.decide(sv.SERVING, lost).kind == sv.DEGRADE  # a lost node comes first


def test_a_wedge_takes_the_configured_rounds_in_a_row() -> None:
    policy = sv.Policy(replace(SETTINGS, wedge_probes=3, deadline_s=5.0))
    wedged = probe(gen=False, detail="generation: timed out")
    assert policy.decide(sv.SERVING, wedged).kind == sv.NOTHING
    assert policy.decide(sv.SERVING, probe()).kind == sv.NOTHING  # a good round resets
    assert policy.decide(sv.SERVING, wedged).kind == sv.NOTHING
    assert policy.decide(sv.SERVING, wedged).kind == sv.NOTHING
    action = policy.decide(sv.SERVING, wedged)
    assert action == sv.Action(
        sv.RESTART,
        "wedged: /health answers but no token within 5 s for 3 probes in a row "
        "(generation: timed out)",
        wait_s=0.0,
    )


def test_backoff_doubles_and_the_crash_loop_ends_after_exactly_k_restarts() -> None:
    policy = sv.Policy(SETTINGS)
    waits = [policy.restart(100.0 + i, "crash").wait_s for i in range(3)]
    assert waits == [0.0, 2.0, 4.0]
    assert policy.restart(104.0, "crash") == sv.Action(
        sv.FAIL, "crash loop: 3 restarts within 600 s did not keep it up; last cause: crash"
    )


def test_backoff_is_capped_and_old_restarts_leave_the_window() -> None:
    policy = sv.Policy(replace(SETTINGS, crash_restarts=10, crash_window_s=60.0))
    waits = [policy.restart(float(i), "c").wait_s for i in range(5)]
    assert waits == [0.0, 2.0, 4.0, 8.0, 10.0]
    assert policy.restart(1000.0, "c").wait_s == 0.0  # the five are out of the window
    assert policy.restarts_at == [1000.0]


def test_a_lost_member_degrades_and_its_return_restarts_the_group() -> None:
    policy = sv.Policy(SETTINGS)
    lost = probe(100.0, member("node1"), member(reachable=False, error="ssh: no route"))
    assert policy.decide(sv.SERVING, lost) == sv.Action(
        sv.DEGRADE, "lost node2: ssh: no route", nodes=("node2",)
    )
    cut = probe(100.0, member("node1"), member(fabric=False))
    assert policy.decide(sv.SERVING, cut).nodes == ("node2",)
    assert "fabric" in policy.decide(sv.SERVING, cut).cause
    assert policy.decide(sv.DEGRADED, lost).kind == sv.DEGRADE  # still lost: no restart
    back = policy.decide(sv.DEGRADED, probe(130.0))
    assert (back.kind, back.cause) == (sv.RESTART, "every member answers again")


def test_nothing_happens_once_failed_or_stopped() -> None:
    dead = probe(100.0, member(alive=False))
    for state in (sv.FAILED, sv.STOPPED):
        assert sv.Policy(SETTINGS).decide(state, dead).kind == sv.NOTHING


@pytest.mark.parametrize(
    ("mem", "cause"),
    [
        (
            {"mem_total_kib": 100 << 20, "mem_available_kib": 2 << 20},
            "memory guard: node2 had 2.0 GiB available (2.0 % of 100.0 GiB, below 3 %): "
            "stopped the engine before the node froze",
        ),
        (
            {"pressure_full_avg10": 75.5},
            "memory guard: node2's memory pressure (full avg10) was 75.5 % (above 60 %): "
            "stopped the engine before the node froze",
        ),
        ({"mem_total_kib": 100 << 20, "mem_available_kib": 4 << 20}, ""),
        ({"pressure_full_avg10": 60.0}, ""),
    ],
)
def test_memory_guard(mem: dict[str, object], cause: str) -> None:
    action = sv.Policy(SETTINGS).decide(sv.SERVING, probe(1.0, member("node1"), member(**mem)))
    assert action == (sv.Action(sv.MEMORY_STOP, cause) if cause else sv.Action(sv.NOTHING))


def test_member_answer_as_the_probe_script_prints_it() -> None:
    text = (
        "alive=1\nmem_total_kib=131072000\nmem_available_kib=90000000\n"
        "psi_full=avg10=1.25 avg60=0.50 avg300=0.10 total=123456\n"
    )
    assert sv.parse_member_answer("node2", text) == sv.MemberProbe(
        "node2", True, True, None, 131072000, 90000000, 1.25
    )
    bare = sv.parse_member_answer("node1", "alive=0\nmem_total_kib=abc\npsi_full=avg10=900\n")
    assert bare == sv.MemberProbe("node1", True, False, None, None, None, None)


@given(st.text(max_size=400))
def test_member_answer_never_raises_and_values_stay_in_range(text: str) -> None:
    found = sv.parse_member_answer("n", text)
    assert found.pressure_full_avg10 is None or 0.0 <= found.pressure_full_avg10 <= 100.0
    for value in (found.mem_total_kib, found.mem_available_kib):
        assert value is None or 0 <= value < 10**18


@given(
    st.lists(
        st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
        min_size=1,
        max_size=40,
    )
)
def test_restarts_never_exceed_k_within_the_window(rounds: list[tuple[bool, ...]]) -> None:
    policy, state = sv.Policy(SETTINGS), sv.SERVING
    for i, (alive, health, gen, reachable) in enumerate(rounds):
        action = policy.decide(
            state, probe(float(i), member(alive=alive, reachable=reachable), health=health, gen=gen)
        )
        state = {sv.FAIL: sv.FAILED, sv.DEGRADE: sv.DEGRADED, sv.RESTART: sv.SERVING}.get(
            action.kind, state
        )
        window = [t for t in policy.restarts_at if i - t < SETTINGS.crash_window_s]
        assert len(window) <= SETTINGS.crash_restarts
        assert action.kind != sv.RESTART or 0 <= action.wait_s <= SETTINGS.backoff_max_s
