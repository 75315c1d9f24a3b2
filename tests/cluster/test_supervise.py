"""What 'halo status' makes of the supervisor's state file (the head wrote it; the controller
only reads it): complete objects, a supervisor that died shown as not running, garbage kept
out."""

from __future__ import annotations

from typing import Any

from halo_cluster.serving.status import HISTORY_SHOWN, supervisor_summary
from halo_cluster.supervise.control import SupervisorStatus
from halo_cluster.wire.supervise import parse_state


def record(running: bool = True, **changes: Any) -> SupervisorStatus:
    """The status of a supervisor whose state file holds ``changes`` over a serving one;
    a file halo cannot read is kept as its problem, as ``control.status`` keeps it."""
    from halo_cluster.errors import WireError

    try:
        return SupervisorStatus(running, parse_state(document(**changes)))
    except WireError as err:
        return SupervisorStatus(running, None, f"unreadable state file ({err})")


def document(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "version": 1,
        "cluster": "strix",
        "engine": "llama.cpp",
        "model": "/m.gguf",
        "pid": 4242,
        "state": "serving",
        "since": 1000.0,
        "serving_since": 1100.0,
        "started_at": 1000.0,
        "restarts": 1,
        "attempts": 2,
        "cause": None,
        "last_probe": {
            "at": 1190.0,
            "health": True,
            "generated": True,
            "latency_s": 0.0042,
            "detail": None,
        },
        "nodes": {"n1": {"reachable": True, "alive": True}},
        "history": [
            {"at": 1000.0, "state": "serving", "cause": None},
            {"at": 1090.0, "state": "restarting", "cause": "the engine's process exited on n2"},
            {"at": 1100.0, "state": "serving", "cause": None},
        ],
    }
    return {**base, **changes}


def test_a_serving_supervisor_is_summed_up() -> None:
    assert supervisor_summary(record(), now=1200.0) == {
        "state": "serving",
        "running": True,
        "uptime_s": 100.0,
        "restarts": 1,
        "attempts": 2,
        "cause": None,
        "probe_latency_s": 0.0042,
        "probe_at": 1190.0,
        "nodes": {"n1": {"reachable": True, "alive": True}},
        "history": document()["history"],
    }


def test_a_supervisor_whose_process_is_gone_is_not_running_whatever_its_file_says() -> None:
    summary = supervisor_summary(record(running=False), now=1200.0)
    assert summary is not None and (summary["state"], summary["running"]) == ("not running", False)
    # an end it reached itself is kept
    failed = supervisor_summary(record(running=False, state="failed", cause="crash loop"))
    assert failed is not None and (failed["state"], failed["cause"]) == ("failed", "crash loop")


def test_no_file_and_odd_fields_give_none_or_nothing_made_up() -> None:
    assert supervisor_summary(None) is None
    for odd in ({"serving_since": "soon"}, {"last_probe": [1]}, {"history": {"a": 1}}):
        summary = supervisor_summary(record(**odd), now=1200.0)
        assert summary is not None and summary["state"] == "unknown"
        assert summary["cause"].startswith("unreadable state file (supervisor state: ")
    assert supervisor_summary(record(nodes=None), now=1200.0)["nodes"] == {}  # type: ignore[index]


def test_only_the_latest_state_changes_are_shown() -> None:
    history = [{"at": float(i), "state": "restarting", "cause": str(i)} for i in range(25)]
    summary = supervisor_summary(record(history=history))
    assert summary is not None and summary["history"] == history[-HISTORY_SHOWN:]
