"""Node side: the supervisor that ``halo serve`` leaves on the head (``supervise``).

It reads one spec (JSON, 0600, written by the controller into the head's state directory:
the members, the scripts that started the serving group in order, the scripts that probe
and stop it, the API key), then probes every ``interval_s`` and acts on
``supervision.Policy``'s decision. It needs nothing from the machine ``halo serve`` ran on:
the other members are reached over SSH from the head, with a key of the head's own that the
controller authorized on each of them for this server (removed by ``halo stop``).

A restart stops every member, waits its backoff, replays the start scripts in their first
order (so llama.cpp's rpc-servers come up before llama-server, vLLM's ranks in rank order),
waits for /health, then proves again: one generation, and every counted member's counters
around one probe request (``witness.traffic``), with the paths the plans asked for.

Its state (``supervise-NAME.json`` beside the spec) is rewritten atomically at every change and
every round; its log is its stdout. SIGTERM ends it between two steps (``halo stop`` stops it
before the server, so a stop never races a restart)."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from halo_cluster import supervision as sv
from halo_cluster.atomic import atomic_write
from halo_cluster.bounded.infile import read_text
from halo_cluster.bounded.jsonin import loads
from halo_cluster.errors import HaloError, StateError
from halo_cluster.facts.model import PathCounters
from halo_cluster.jsonout import JsonObject
from halo_cluster.node.serve_api import complete, greedy_answers, health
from halo_cluster.runner.local import LocalRunner
from halo_cluster.runner.prefix import PrefixRunner
from halo_cluster.runner.result import Runner
from halo_cluster.runner.ssh import SSHRunner
from halo_cluster.wire.answers import parse_counters
from halo_cluster.wire.supervise import (
    Change,
    LastProbe,
    Member,
    Spec,
    SupervisorState,
    TokenCheck,
    parse_spec,
)
from halo_cluster.witness.logs import log_nodes, recheck_problems
from halo_cluster.witness.tokens import compare
from halo_cluster.witness.traffic import check_paths, per_token

MAX_SPEC = 4 << 20
PROOF_TOKENS = 64
PROBE_TIMEOUT_S = 20.0  # one member's probe script, SSH included
FAN_OUT = 16  # members probed at once


def read_spec(path: Path) -> Spec:
    """The spec the controller wrote (``wire.supervise``); a wrong one is one line
    (``StateError``)."""
    try:
        return parse_spec(loads(read_text(path, MAX_SPEC, "supervisor spec")))
    except (ValueError, OSError, HaloError) as err:
        if isinstance(err, StateError):
            raise
        raise StateError(f"{path}: unreadable supervisor spec ({err})") from None


def ssh_config_text(spec: Spec, key: Path, known_hosts: Path) -> str:
    """The head's own ssh config for reaching the members: its key only, its own known_hosts
    (a member's host key is learned at the first connection, which the controller makes
    while installing), dead peers noticed within seconds."""
    blocks = []
    for member in spec.members:
        if member.ssh is None:
            continue
        blocks.append(
            f"Host halo-member-{member.name}\n"
            f"  HostName {member.ssh.host}\n"
            + (f"  User {member.ssh.user}\n" if member.ssh.user else "")
            + (f"  Port {int(member.ssh.port)}\n" if member.ssh.port else "")
            + f"  IdentityFile {key}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {known_hosts}\n  StrictHostKeyChecking accept-new\n"
            "  ServerAliveInterval 2\n  ServerAliveCountMax 3\n  LogLevel ERROR\n"
        )
    return "".join(blocks)


class Supervisor:
    def __init__(self, spec: Spec, spec_path: Path, emit: Callable[[str], None]) -> None:
        self.spec = spec
        self.settings = spec.settings
        self.canary_at = time.monotonic()  # 'halo serve' compared every prompt just now
        base = spec_path.parent / f"supervise-{spec.cluster}"
        self.state_path = Path(f"{base}.json")
        ssh_config = Path(f"{base}.ssh_config")
        atomic_write(
            ssh_config,
            ssh_config_text(spec, Path(f"{base}.key"), Path(f"{base}.known_hosts")),
            mode=0o600,
        )
        self.runners: dict[str, Runner] = {}
        for member in spec.members:
            inner: Runner = (
                LocalRunner()
                if member.ssh is None
                else SSHRunner(f"halo-member-{member.name}", ssh_config)
            )
            self.runners[member.name] = PrefixRunner(inner, member.prefix)
        self.emit = emit
        self.policy = sv.Policy(self.settings)
        self.stopping = threading.Event()
        now = time.time()
        self.record = SupervisorState(
            spec.cluster, spec.engine, spec.model, os.getpid(), self.settings, sv.STARTING,
            since=now, started_at=now,
        )  # fmt: skip

    # -- state ------------------------------------------------------------------------------
    def set_state(self, state: str, cause: str | None = None) -> None:
        now = time.time()
        record = self.record
        if state != record.state or cause != record.cause:
            self.log(f"state {state}" + (f": {cause}" if cause else ""))
            record.history.append(Change(round(now, 3), state, cause))
            del record.history[: -sv.HISTORY_KEPT]
        if state != record.state:
            record.since = now
            record.serving_since = now if state == sv.SERVING else None
        record.state, record.cause = state, cause
        self.save()

    def save(self) -> None:
        atomic_write(
            self.state_path, json.dumps(self.record.to_dict(), indent=1) + "\n", mode=0o600
        )

    def log(self, line: str) -> None:
        self.emit(time.strftime("%Y-%m-%dT%H:%M:%S ") + line)

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> int:
        """Probe and act until stopped; 0 when stopped, 1 when it ended in ``failed``."""
        self.log(
            f"supervising {self.spec.engine} {self.spec.model} on "
            f"{', '.join(m.name for m in self.spec.members)} (every {self.settings.interval_s:g} s)"
        )
        self.set_state(sv.SERVING)  # 'halo serve' proved it before starting the supervisor
        while not self.stopping.is_set():
            state = self.record.state
            if state == sv.FAILED:
                self.stopping.wait(self.settings.interval_s)  # nothing more until the user acts
                continue
            probe = self.probe()
            action = self.policy.decide(state, probe)
            self.act(action)
            self.stopping.wait(self.settings.interval_s)
        self.set_state(sv.STOPPED, "halo stop")
        return 0

    def act(self, action: sv.Action) -> None:
        if action.kind == sv.DEGRADE:
            self.set_state(sv.DEGRADED, action.cause)
        elif action.kind == sv.MEMORY_STOP or action.kind == sv.FAIL:
            self.stop_all()
            self.set_state(sv.FAILED, action.cause)
        elif action.kind == sv.RESTART:
            self.restart_until_proven(action)

    # -- probes -------------------------------------------------------------------------------
    def probe(self) -> sv.Probe:
        at = time.time()
        with ThreadPoolExecutor(min(FAN_OUT, len(self.spec.members))) as pool:
            members = tuple(pool.map(self.probe_member, self.spec.members))
        if sv.lost_members(sv.Probe(at, members, True, True)):  # nothing to ask the server
            healthy, generated, latency, detail = False, False, None, "a member is lost"
        else:
            healthy, generated, latency, detail = self.generate()
        garbage = self.canary() if healthy and generated else ""
        probe = sv.Probe(at, members, healthy, generated, latency, detail, garbage)
        rounded = None if latency is None else round(latency, 4)
        self.record.last_probe = LastProbe(round(at, 3), healthy, generated, rounded, detail)
        self.record.nodes = {m.name: _member_dict(m) for m in members}
        self.save()
        return probe

    def probe_member(self, member: Member) -> sv.MemberProbe:
        script = self.spec.probe_script
        if member.ray and self.spec.ray_check_script:
            script = self.spec.ray_check_script + script
        if member.fabric and member.ssh is not None:  # asked on the head, of the member's address
            fabric = self.runners[self.spec.head].run(
                ["bash", "-s"], fabric_script(member.fabric), PROBE_TIMEOUT_S
            )
            fabric_ok: bool | None = None if fabric.returncode == 2 else fabric.ok
        else:
            fabric_ok = None
        answer = self.runners[member.name].run(["bash", "-s"], script, PROBE_TIMEOUT_S)
        if not answer.ok:
            return sv.MemberProbe(member.name, False, error=_short(answer.error_text()))
        found = sv.parse_member_answer(member.name, answer.stdout)
        if not member.runs:
            found = sv.MemberProbe(**{**found.__dict__, "alive": True})
        error = "" if fabric_ok is not False else (
            f"its fabric address {member.fabric} does not answer a ping from {self.spec.head}"
        )  # fmt: skip
        return sv.MemberProbe(**{**found.__dict__, "fabric": fabric_ok, "error": error})

    def generate(self, tokens: int = 1) -> tuple[bool, bool, float | None, str]:
        """(/health answered, ``tokens`` generated within the deadline, seconds, why not)."""
        spec, deadline = self.spec, self.settings.deadline_s
        host = "127.0.0.1" if spec.host == "0.0.0.0" else spec.host
        try:
            health(host, spec.port, spec.api_key, timeout_s=min(10.0, deadline))
        except (OSError, ValueError) as err:
            # a round that fails either way: no generation to wait for on top (a wedge that
            # also stops /health is then found in wedge_probes x (10 s + the interval))
            return False, False, None, f"/health: {_short(str(err))}"
        started = time.monotonic()
        try:
            complete(host, spec.port, spec.api_key, tokens, timeout_s=deadline)
        except (OSError, ValueError) as err:
            return True, False, None, f"generation: {_short(str(err))}"
        return True, True, time.monotonic() - started, ""

    # -- restarts -----------------------------------------------------------------------------
    def restart_until_proven(self, action: sv.Action) -> None:
        while not self.stopping.is_set():
            self.set_state(sv.RESTARTING, action.cause)
            self.stop_all()
            self.log(f"restart {len(self.policy.restarts_at)}: in {action.wait_s:g} s")
            if self.stopping.wait(action.wait_s):
                return
            self.record.attempts += 1
            error = self.start_group()
            if error is None:
                self.record.restarts += 1
                self.set_state(sv.SERVING, None)
                return
            self.log(f"restart failed: {error}")
            action = self.policy.restart(time.time(), f"restart failed: {error}")
            if action.kind == sv.FAIL:
                self.stop_all()
                self.set_state(sv.FAILED, action.cause)
                return

    def stop_all(self) -> None:
        with ThreadPoolExecutor(min(FAN_OUT, len(self.spec.members))) as pool:
            list(pool.map(
                lambda m: self.runners[m.name].run(["bash", "-s"], self.spec.stop_script, 60.0),
                self.spec.members,
            ))  # fmt: skip

    def start_ray(self) -> str | None:
        """Ray where it is not running (a node that came back): each node's own script from
        'halo up', the head first; then until Ray's table shows them all. None, or why not."""
        members = [m for m in self.spec.members if m.ray]
        if not members or not self.spec.ray_start_script:
            return None
        started = []
        for member in sorted(members, key=lambda m: m.name != self.spec.head):
            runner = self.runners[member.name]
            check = runner.run(["bash", "-s"], self.spec.ray_check_script, PROBE_TIMEOUT_S)
            if "ray=1" in check.stdout:
                continue
            self.log(f"starting Ray on {member.name} again")
            done = runner.run(["bash", "-s"], self.spec.ray_start_script, 180.0)
            if not done.ok:
                return f"{member.name}: ray start failed: {_short(done.error_text())}"
            started.append(member.name)
        if started and self.spec.ray_wait:
            # on stdin with Ray's token exported (a cluster with auth refuses a client
            # without it), never in argv
            wait = self.spec.ray_env_script + shlex.join(self.spec.ray_wait) + "\n"
            waited = self.runners[self.spec.head].run(["bash", "-s"], wait, 180.0)
            if not waited.ok:
                return f"Ray did not see {', '.join(started)} again: {_short(waited.error_text())}"
        return None

    def start_group(self) -> str | None:
        """Start the group as it was first started and prove it; None, or why it failed."""
        ray = self.start_ray()
        if ray is not None:
            return ray
        for step in self.spec.start:
            if self.stopping.is_set():
                return "stopped"
            done = self.runners[step.node].run(list(step.argv), step.stdin, step.timeout_s)
            if not done.ok:
                dead = [m for m in self.spec.members if m.runs and not self.member_alive(m)]
                why = (
                    f"the engine exited on {dead[0].name} while starting: {self.last_line(dead[0])}"
                    if dead
                    else _short(done.error_text())
                )
                return f"{step.node}: a start step failed: {why}"
        error = self.wait_healthy()
        return error if error is not None else self.prove()

    def wait_healthy(self) -> str | None:
        """None once the restarted group serves; else why not: a member's engine exited,
        its load stalled (no log line and no storage read or write on any member for the
        spec's ``stall_s``), or the start timeout passed."""
        deadline = time.monotonic() + self.settings.start_timeout_s
        stall = self.spec.stall_s if self.spec.progress_script else 0.0
        watch, every = sv.StallWatch(stall), min(sv.CHECK_EVERY_S, stall / 2)
        asked = float("-inf")
        while not self.stopping.is_set():
            healthy, generated, _latency, _detail = self.generate()
            if healthy and generated:
                return None
            dead = [m for m in self.spec.members if m.runs and not self.member_alive(m)]
            if dead:
                return f"the engine exited on {dead[0].name} while starting: " + self.last_line(
                    dead[0]
                )
            now = time.monotonic()
            if stall and now - asked >= every:
                asked = now
                watch.observe(now, self.progress())
                stalled = watch.stalled(now)
                if stalled is not None:
                    return stalled
            if now > deadline:
                return f"not serving within {self.settings.start_timeout_s:g} s of the restart"
            self.stopping.wait(1.0 if not stall else min(1.0, every))
        return "stopped"

    def progress(self) -> dict[str, str]:
        """Each running member's answer to the progress script ('' where none came)."""
        script = self.spec.progress_script
        return {
            m.name: self.runners[m.name].run(["bash", "-s"], script, 30.0).stdout
            for m in self.spec.members
            if m.runs
        }

    def member_alive(self, member: Member) -> bool:
        answer = self.runners[member.name].run(["bash", "-s"], self.spec.probe_script, 30.0)
        return answer.ok and sv.parse_member_answer(member.name, answer.stdout).alive

    def last_line(self, member: Member) -> str:
        tail = self.runners[member.name].run(["bash", "-s"], self.spec.log_tail_script, 30.0)
        lines = [line.strip() for line in tail.stdout.splitlines() if line.strip()]
        return _short(lines[-1]) if lines else "its log is empty"

    def prove(self) -> str | None:
        """Every witness again, as at the first proof: the engine's own words (its logs),
        the tokens against the one-node reference, then the counters around one probe
        request."""
        said = self.recheck_logs() or self.recheck_tokens()
        if said is not None:
            return said
        counted = self.spec.counted
        if len(counted) < 2 and not self.spec.rdma:
            return None  # one node holds the whole model: no fabric to prove
        before = self.read_counters(counted)
        host = "127.0.0.1" if self.spec.host == "0.0.0.0" else self.spec.host
        try:
            probe = complete(host, self.spec.port, self.spec.api_key, PROOF_TOKENS, 300.0)
        except (OSError, ValueError) as err:
            return f"the proof's request failed: {_short(str(err))}"
        after = self.read_counters(counted)
        nodes = {n: per_token(before[n], after.get(n, {}), probe.completion_tokens) for n in before}
        problems = check_paths(nodes, self.spec.rdma)
        self.record.proof = {"at": round(time.time(), 3), "nodes": nodes, "problems": problems}
        if problems and not self.spec.allow_fallback:
            return "the counters show another path than the plans asked for: " + problems[0]
        return None

    def canary(self) -> str:
        """The token witness's first prompt against the one-node reference, at most every
        ``canary_s`` (a few tokens): what differs ('' when the answer is the reference's, or
        when it is not due, or there is no reference). A server whose weights or container
        changed under it answers /health and a one-token probe all the same."""
        check, every = self.spec.tokens, self.settings.canary_s
        now = time.monotonic()
        if check is None or every <= 0 or now - self.canary_at < every:
            return ""
        self.canary_at = now
        one = dataclasses.replace(check, prompts=check.prompts[:1], answers=check.answers[:1])
        problem: str | None = ""
        for _ in range(2):  # asked again before it counts: batched traffic may tip a near tie
            problem = self.recheck_tokens(one, canary=True)
            if problem is None or "requests failed" in problem:
                return ""
        return problem or ""

    def recheck_tokens(self, check: TokenCheck | None = None, canary: bool = False) -> str | None:
        check = check or self.spec.tokens
        if check is None:
            return None  # 'halo serve' compared no tokens (no reference): nothing to repeat
        host = "127.0.0.1" if self.spec.host == "0.0.0.0" else self.spec.host
        try:
            got = greedy_answers(
                host, self.spec.port, self.spec.api_key, list(check.prompts), check.tokens,
                check.top, timeout_s=max(self.settings.deadline_s, 60.0) if canary else 300.0,
            )  # fmt: skip
        except (OSError, ValueError) as err:
            return f"the token witness's requests failed: {_short(str(err))}"
        verdict = compare(check.layout, check.reference_layout, check.answers, got.answers)
        self.record.proof_tokens = {"at": round(time.time(), 3), "canary": canary,
                                    **verdict.to_dict()}  # fmt: skip
        if verdict.problems:
            return "the tokens differ from the one-node reference: " + verdict.problems[0]
        return None

    def recheck_logs(self) -> str | None:
        recheck = self.spec.recheck
        if recheck is None or not self.spec.log_script:
            return None  # an engine that gave nothing to recheck: the counters alone
        nodes = [n for n in log_nodes(recheck) if n in self.runners]
        logs = {
            n: self.runners[n].run(["bash", "-s"], self.spec.log_script, 120.0).stdout
            for n in nodes
        }
        problems = recheck_problems(recheck, logs)
        self.record.proof_log = {"at": round(time.time(), 3), "problems": problems}
        if problems and not self.spec.allow_fallback:
            return "the engine's log shows another path than the plans asked for: " + problems[0]
        return None

    def read_counters(self, members: list[Member]) -> dict[str, dict[str, PathCounters]]:
        def one(member: Member) -> dict[str, PathCounters]:
            assert member.counters is not None
            done = self.runners[member.name].run(list(member.counters), None, 30.0)
            try:
                return dict(parse_counters(done.stdout).paths) if done.ok else {}
            except ValueError:
                return {}

        with ThreadPoolExecutor(min(FAN_OUT, len(members))) as pool:
            return dict(zip([m.name for m in members], pool.map(one, members)))


def fabric_script(address: str) -> str:
    """Exit 0 when ``address`` answers a ping within 2 s (any of 3), 1 when not, 2 without
    ping on the head."""
    import shlex

    return (
        "command -v ping >/dev/null 2>&1 || exit 2\n"
        f"ping -c 3 -i 0.2 -w 2 -q {shlex.quote(address)} >/dev/null 2>&1\n"
    )


def _member_dict(member: sv.MemberProbe) -> JsonObject:
    return {k: v for k, v in member.__dict__.items() if k != "name"}


def _short(text: str, limit: int = 300) -> str:
    from halo_cluster.printable import printable

    return printable(" ".join(text.split()), limit=limit)


def main(spec_path: str, emit: Callable[[str], None]) -> int:
    path = Path(spec_path)
    try:
        spec = read_spec(path)
    except StateError as err:
        emit(f"halo: error: {err}")
        return 2
    supervisor = Supervisor(spec, path, emit)

    def stop(_signum: int, _frame: Any) -> None:
        supervisor.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return supervisor.run()
