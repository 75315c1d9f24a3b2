"""The supervisor's loop for real on this machine, one member (the head itself): a stand-in
server started by the start script halo records, killed, wedged (SIGSTOP), made unable to
start (a crash loop), and the supervisor stopped. Each wait ends on the state it waits for;
its bound only keeps a broken loop from hanging the suite."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from halo_cluster import supervision as sv
from halo_cluster.engines import scripts
from halo_cluster.errors import StateError
from halo_cluster.node.supervisor import Supervisor, read_spec
from halo_cluster.wire.answers import TokenAnswer
from halo_cluster.wire.supervise import TokenCheck

STANDIN = Path(__file__).with_name("standin_server.py")
CLUSTER = "sup-test"
BOUND_S = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def spec(tmp: Path, port: int, **settings: Any) -> dict[str, Any]:
    argv = [sys.executable, str(STANDIN), str(port), str(tmp / "broken")]
    return {
        "version": 1,
        "cluster": CLUSTER,
        "head": "node1",
        "engine": "standin",
        "model": "standin",
        "host": "127.0.0.1",
        "port": port,
        "api_key": None,
        "rdma": False,
        "allow_fallback": False,
        "settings": {"interval_s": 0.5, "deadline_s": 3.0, "backoff_s": 0.2, **settings},
        "members": [
            {
                "name": "node1",
                "ssh": None,
                "prefix": [],
                "fabric": None,
                "counters": None,
                "runs": True,
            }
        ],
        "start": [
            {
                "node": "node1",
                "argv": ["bash", "-s"],
                "stdin": scripts.background_script({}, argv, CLUSTER),
                "timeout_s": 30,
            },
            {
                "node": "node1",
                "argv": ["bash", "-s"],
                "stdin": scripts.reach_script("127.0.0.1", port, 5),
                "timeout_s": 30,
            },
        ],
        "probe_script": scripts.probe_script(CLUSTER),
        "stop_script": scripts.stop_script(CLUSTER),
        "log_tail_script": scripts.log_tail_script(CLUSTER),
    }


def until(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"not seen within {BOUND_S:g} s: {what}")


def pid_of() -> int:
    _log, pid = scripts.log_paths(CLUSTER)
    text = os.popen(f"cat {pid}").read().strip()  # the shell expands the state directory
    return int(text)


def process_state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "gone"
    return stat.rsplit(") ", 1)[1].split()[0]


@pytest.fixture
def supervised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    port = free_port()
    lines: list[str] = []
    running: list[tuple[Supervisor, threading.Thread]] = []

    def start(
        tokens: dict[str, Any] | None = None,
        edit: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        **settings: Any,
    ) -> Supervisor:
        path = tmp_path / "spec.json"
        written = {**spec(tmp_path, port, **settings), "tokens": tokens}
        path.write_text(json.dumps(edit(written) if edit else written))
        path.chmod(0o600)
        sup = Supervisor(read_spec(path), path, lines.append)
        started = sup.start_group()  # as 'halo serve' started it before leaving it
        if started is not None:
            sup.stop_all()  # what the failed start left is stopped before the test fails
        assert started is None
        thread = threading.Thread(target=sup.run, daemon=True)
        thread.start()
        running.append((sup, thread))
        return sup

    yield start, lines, tmp_path
    for sup, thread in running:
        sup.stopping.set()
        thread.join(30)
        sup.stop_all()


def test_a_killed_server_is_restarted_and_serving_again(supervised: Any) -> None:
    start, _lines, _tmp = supervised
    sup = start()
    until(lambda: sup.record.last_probe and sup.record.last_probe.generated, "a probe")
    first = pid_of()
    os.kill(first, signal.SIGKILL)
    until(lambda: sup.record.restarts == 1 and sup.record.state == sv.SERVING, "restarted")
    assert pid_of() != first
    causes = [h.cause for h in sup.record.history if h.state == sv.RESTARTING]
    assert causes == ["the engine's process exited on node1"]
    saved = json.loads(sup.state_path.read_text())
    assert saved["state"] == sv.SERVING and saved["restarts"] == 1
    assert oct(sup.state_path.stat().st_mode & 0o777) == "0o600"


def token_check(text: str) -> dict[str, Any]:
    """The token witness as 'halo serve' hands it on: the reference's answer to one prompt
    (the stand-in answers "xxxx" to every greedy 4-token request)."""
    return {
        "layout": "standin on node1", "reference_layout": "standin on node1",
        "prompts": ["The capital of France is"], "tokens": 4, "top": 5,
        "answers": [{"text": text, "steps": []}],
    }  # fmt: skip


def test_a_restart_is_proven_by_the_tokens_too(supervised: Any) -> None:
    start, _lines, _tmp = supervised
    sup = start(tokens=token_check("xxxx"))
    until(lambda: sup.record.last_probe and sup.record.last_probe.generated, "a probe")
    os.kill(pid_of(), signal.SIGKILL)
    until(lambda: sup.record.restarts == 1 and sup.record.state == sv.SERVING, "restarted")
    assert sup.record.proof_tokens is not None and sup.record.proof_tokens["problems"] == []


def test_a_restart_whose_tokens_differ_is_not_serving(supervised: Any) -> None:
    start, _lines, _tmp = supervised
    sup = start(tokens=token_check("xxxx"), crash_restarts=1)
    until(lambda: sup.record.last_probe and sup.record.last_probe.generated, "a probe")
    # the server that comes back answers otherwise than the reference
    other = TokenCheck(**{**sup.spec.tokens.__dict__, "answers": (TokenAnswer("xxyx", ()),)})
    sup.spec = replace(sup.spec, tokens=other)
    os.kill(pid_of(), signal.SIGKILL)
    until(lambda: sup.record.state == sv.FAILED, "failed")
    assert sup.record.restarts == 0
    assert "the tokens differ from the one-node reference" in (sup.record.cause or "")


def test_the_canary_finds_garbage_behind_a_green_health_check(supervised: Any) -> None:
    """Issue 47, item 7: the server keeps answering /health and one-token probes, but its
    answer to the reference's first prompt is no longer the reference's (as when weights
    change under a running server): the canary restarts it, and the restart's proof, the
    token witness again, keeps failing, so it ends in failed."""
    start, _lines, _tmp = supervised
    sup = start(tokens=token_check("xxxx"), canary_s=0.5, crash_restarts=1)
    until(lambda: (sup.record.proof_tokens or {}).get("canary"), "a canary that passed")
    assert sup.record.proof_tokens["problems"] == [] and sup.record.state == sv.SERVING
    other = TokenCheck(**{**sup.spec.tokens.__dict__, "answers": (TokenAnswer("xxyx", ()),)})
    sup.spec = replace(sup.spec, tokens=other)
    until(lambda: sup.record.state == sv.FAILED, "failed")
    restarting = [h.cause for h in sup.record.history if h.state == sv.RESTARTING]
    assert restarting[0].startswith(
        "garbage: the tokens differ from the one-node reference: standin on node1: prompt 1 "
        "differs from the one-node reference (standin on node1) at character 2"
    ), restarting


def test_a_stopped_server_is_a_wedge_and_restarted(supervised: Any) -> None:
    start, _lines, _tmp = supervised
    sup = start(wedge_probes=2)
    until(lambda: sup.record.last_probe, "a probe")
    wedged = pid_of()
    os.kill(wedged, signal.SIGSTOP)
    until(lambda: sup.record.restarts == 1 and sup.record.state == sv.SERVING, "restarted")
    cause = next(h.cause for h in sup.record.history if h.state == sv.RESTARTING)
    assert cause.startswith("wedged: no token within 3 s for 2 probes in a row")
    assert process_state(wedged) in ("gone", "Z")  # stopped for good (a zombie until reaped)


def test_a_crash_loop_ends_in_failed_after_exactly_k_restarts(supervised: Any) -> None:
    start, lines, tmp = supervised
    sup = start(crash_restarts=2)
    until(lambda: sup.record.last_probe, "a probe")
    (tmp / "broken").write_text("")  # the model cannot be loaded any more
    os.kill(pid_of(), signal.SIGKILL)
    until(lambda: sup.record.state == sv.FAILED, "failed")
    assert sup.record.restarts == 0
    assert len(sup.policy.restarts_at) == 2
    assert sup.record.cause.startswith("crash loop: 2 restarts within 600 s did not keep it up")
    assert "cannot load the model" in sup.record.cause
    assert sum(line.split(" ", 1)[1].startswith("restart failed:") for line in lines) == 2
    time.sleep(1.5)  # three more rounds' time: nothing more is tried
    assert len(sup.policy.restarts_at) == 2 and sup.record.state == sv.FAILED


def test_a_restart_whose_load_stalls_fails_with_that_cause(supervised: Any) -> None:
    """Issue 47, item 6, on a restart: the engine's process runs but writes no log line and
    reads nothing; after the spec's stall_s with no progress on any member the start fails
    with that cause, instead of waiting out the start timeout (900 s)."""
    start, _lines, tmp = supervised

    def watched(written: dict[str, Any]) -> dict[str, Any]:
        return {
            **written,
            "start": written["start"][:1],  # the background start alone: no wait for the port
            "progress_script": scripts.progress_script(CLUSTER),
            "stall_s": 2,
        }

    sup = start(edit=watched, crash_restarts=1)
    until(lambda: sup.record.last_probe, "a probe")
    (tmp / "broken.stall").write_text("")  # the next load hangs before it listens
    os.kill(pid_of(), signal.SIGKILL)
    until(lambda: sup.record.state == sv.FAILED, "failed")
    assert sup.record.cause.startswith("crash loop: 1 restarts within 600 s did not keep it up")
    assert "no progress for 2 s while loading: no new log line" in sup.record.cause


def test_stopping_the_supervisor_leaves_the_server_to_halo_stop(supervised: Any) -> None:
    start, _lines, _tmp = supervised
    sup = start()
    until(lambda: sup.record.last_probe, "a probe")
    sup.stopping.set()
    until(lambda: sup.record.state == sv.STOPPED, "stopped")
    os.kill(pid_of(), 0)  # the server itself is stopped by 'halo stop', after the supervisor


def test_a_spec_that_is_not_one_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "spec.json"
    for text, said in (
        ("{", "unreadable supervisor spec"),
        ('{"version": 9}', "not a supervisor spec of version 1"),
        ('{"version": 1, "members": []}', "unreadable supervisor spec (supervisor spec: no field"),
    ):
        bad.write_text(text)
        with pytest.raises(StateError) as err:
            read_spec(bad)
        assert said in str(err.value) and "\n" not in str(err.value)
