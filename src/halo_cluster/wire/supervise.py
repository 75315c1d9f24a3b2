"""The supervisor's spec, as one typed value both sides use: the controller makes it when
``halo serve`` has proven a server (``supervise.control``) and writes ``to_json()`` 0600 into
the head's state directory; the supervisor on the head reads it back (``parse_spec``) and
runs it (``node/supervisor.py``). It holds the API key: it is never printed, logged or put
in argv, and ``repr`` leaves it out.

A ``Step`` is one command an engine's launch ran on a node, in the order it ran (the start
the supervisor replays); a ``Member`` is a node of the serving group as the head reaches it.
Standard library only, Python 3.9; a malformed spec is one ``WireError``, one line."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from halo_cluster.errors import HaloError, WireError
from halo_cluster.jsonout import JsonObject
from halo_cluster.supervision import SuperviseSettings
from halo_cluster.wire.answers import TokenAnswer, token_answer_from_dict
from halo_cluster.wire.recheck import Recheck, parse_recheck

SPEC_VERSION = 1


@dataclass(frozen=True)
class Step:
    node: str
    argv: tuple[str, ...]
    stdin: str | None = field(repr=False)  # a start script: it may export the API key
    timeout_s: float

    def to_dict(self) -> JsonObject:
        return {"node": self.node, "argv": list(self.argv), "stdin": self.stdin,
                "timeout_s": self.timeout_s}  # fmt: skip


@dataclass(frozen=True)
class SshTarget:
    """Where the head reaches a member over SSH (what the controller's ``ssh -G`` resolved)."""

    host: str
    user: str | None = None
    port: int = 22

    def to_dict(self) -> JsonObject:
        return {"host": self.host, "user": self.user, "port": self.port}


@dataclass(frozen=True)
class Member:
    name: str
    ssh: SshTarget | None  # None: the head itself
    prefix: tuple[str, ...]
    fabric: str | None  # its address on the fabric, pinged from the head
    counters: tuple[str, ...] | None  # its counters command (node code), when counted
    runs: bool = True  # an engine process of its own (else only Ray's ranks: their Ray)
    ray: str | None = None  # its Ray's address, when the server runs on Ray

    def to_dict(self) -> JsonObject:
        return {
            "name": self.name,
            "ssh": None if self.ssh is None else self.ssh.to_dict(),
            "prefix": list(self.prefix),
            "fabric": self.fabric,
            "counters": None if self.counters is None else list(self.counters),
            "runs": self.runs,
            "ray": self.ray,
        }


@dataclass(frozen=True)
class TokenCheck:
    """The token witness the supervisor runs again after a restart, as 'halo serve' ran it:
    the served layout's greedy answers to the reference's first prompts against the
    one-node reference's answers (``witness.tokens``)."""

    layout: str  # the layout served, "vllm tp2 on node1+node2"
    reference_layout: str  # the one-node layout the reference was recorded on
    prompts: tuple[str, ...]
    tokens: int  # per prompt
    top: int  # the likeliest tokens asked for at each step
    answers: tuple[TokenAnswer, ...]  # the reference's, one per prompt

    def to_dict(self) -> JsonObject:
        return {"layout": self.layout, "reference_layout": self.reference_layout,
                "prompts": list(self.prompts), "tokens": self.tokens, "top": self.top,
                "answers": [a.to_dict() for a in self.answers]}  # fmt: skip


def _token_check(value: Any) -> TokenCheck | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise WireError("supervisor spec: the token check is not an object")
    answers = value["answers"]
    if not isinstance(answers, list):
        raise WireError("supervisor spec: the token check's answers are not a list")
    return TokenCheck(
        str(value["layout"]),
        str(value["reference_layout"]),
        _words(value["prompts"], "the token check's prompts"),
        int(value["tokens"]),
        int(value["top"]),
        tuple(
            token_answer_from_dict("supervisor spec", a, f"answers[{i}]")
            for i, a in enumerate(answers)
        ),
    )


@dataclass(frozen=True)
class Spec:
    cluster: str
    head: str
    engine: str
    model: str
    host: str
    port: int
    api_key: str | None = field(repr=False)
    rdma: bool
    allow_fallback: bool
    settings: SuperviseSettings
    members: tuple[Member, ...]
    start: tuple[Step, ...]
    probe_script: str  # per member: alive=, mem_*= lines
    stop_script: str  # per member: stop what 'halo serve' started there
    log_tail_script: str  # per member: the last lines of its log
    log_script: str = ""  # per member: its whole log (the engine's own words)
    recheck: Recheck | None = None  # what those words must show (wire.recheck)
    ray_check_script: str = ""  # per Ray member: ray=1 when its raylet runs
    ray_start_script: str = ""  # per Ray member: start its Ray as 'halo up' did
    ray_wait: tuple[str, ...] = ()  # on the head: until these Ray nodes are alive (ray-nodes)
    # exports before ray_wait on the head: Ray's auth token as 'halo up' gave it (a secret,
    # as the API key: the spec is 0600 and travels on stdin)
    ray_env_script: str = ""
    tokens: TokenCheck | None = None  # the token witness after a restart (None: no reference)
    # per member: its signs of progress while a restart loads (log and storage bytes), and
    # how long none may move before the start is a stall (0: not watched)
    progress_script: str = ""
    stall_s: float = 0.0

    @property
    def counted(self) -> list[Member]:
        return [m for m in self.members if m.counters is not None]

    def to_dict(self) -> JsonObject:
        return {
            "version": SPEC_VERSION,
            "cluster": self.cluster,
            "head": self.head,
            "engine": self.engine,
            "model": self.model,
            "host": self.host,
            "port": self.port,
            "api_key": self.api_key,
            "rdma": self.rdma,
            "allow_fallback": self.allow_fallback,
            "settings": self.settings.to_dict(),
            "members": [m.to_dict() for m in self.members],
            "start": [s.to_dict() for s in self.start],
            "probe_script": self.probe_script,
            "stop_script": self.stop_script,
            "log_tail_script": self.log_tail_script,
            "log_script": self.log_script,
            "recheck": None if self.recheck is None else self.recheck.to_dict(),
            "ray_check_script": self.ray_check_script,
            "ray_start_script": self.ray_start_script,
            "ray_wait": list(self.ray_wait),
            "ray_env_script": self.ray_env_script,
            "tokens": None if self.tokens is None else self.tokens.to_dict(),
            "progress_script": self.progress_script,
            "stall_s": self.stall_s,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


def _words(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(w, str) for w in value):
        raise WireError(f"supervisor spec: {where} is not a list of strings")
    return tuple(value)


def _ssh(value: Any) -> SshTarget | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("host"), str):
        raise WireError("supervisor spec: a member's ssh has no host")
    user = value.get("user")
    return SshTarget(str(value["host"]), None if user is None else str(user),
                     int(value.get("port") or 22))  # fmt: skip


def _member(value: Any) -> Member:
    if not isinstance(value, dict):
        raise WireError("supervisor spec: a member is not an object")
    counters = value.get("counters")
    return Member(
        str(value["name"]),
        _ssh(value.get("ssh")),
        _words(value.get("prefix") or [], "a member's prefix"),
        None if value.get("fabric") is None else str(value["fabric"]),
        _words(counters, "a member's counters") if counters else None,
        bool(value.get("runs", True)),
        str(value["ray"]) if value.get("ray") else None,
    )


def _step(value: Any) -> Step:
    if not isinstance(value, dict):
        raise WireError("supervisor spec: a start step is not an object")
    stdin = value.get("stdin")
    return Step(
        str(value["node"]),
        _words(value["argv"], "a step's argv"),
        None if stdin is None else str(stdin),
        float(value["timeout_s"]),
    )


def _stall_s(value: Any) -> float:
    """A stall bound in seconds: a finite number from 0 (not watched) to a day."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"stall_s is {value!r}, not a number")
    if not 0 <= value <= 86400:  # NaN fails too
        raise ValueError(f"stall_s is {value!r}: 0 to 86400 seconds")
    return float(value)


def _settings(value: Any, where: str) -> SuperviseSettings:
    """The supervisor's settings (absent: the defaults); a value of the wrong type or out of
    its range is one WireError naming the key."""
    try:
        return SuperviseSettings.from_dict({} if value is None else value)
    except ValueError as err:
        raise WireError(f"{where}: {err}") from None


def parse_spec(value: Any) -> Spec:
    """A spec as the controller wrote it (parsed JSON)."""
    if not isinstance(value, dict) or value.get("version") != SPEC_VERSION:
        raise WireError(f"not a supervisor spec of version {SPEC_VERSION}")
    try:
        recheck = value.get("recheck")
        return Spec(
            cluster=str(value["cluster"]),
            head=str(value["head"]),
            engine=str(value["engine"]),
            model=str(value["model"]),
            host=str(value["host"]),
            port=int(value["port"]),
            api_key=value.get("api_key") or None,
            rdma=bool(value.get("rdma")),
            allow_fallback=bool(value.get("allow_fallback")),
            settings=_settings(value.get("settings"), "supervisor spec"),
            members=tuple(_member(m) for m in value["members"]),
            start=tuple(_step(s) for s in value["start"]),
            probe_script=str(value["probe_script"]),
            stop_script=str(value["stop_script"]),
            log_tail_script=str(value["log_tail_script"]),
            log_script=str(value.get("log_script") or ""),
            recheck=None if recheck is None else parse_recheck(recheck),
            ray_check_script=str(value.get("ray_check_script") or ""),
            ray_start_script=str(value.get("ray_start_script") or ""),
            ray_wait=_words(value.get("ray_wait") or [], "ray_wait"),
            ray_env_script=str(value.get("ray_env_script") or ""),
            tokens=_token_check(value.get("tokens")),
            progress_script=str(value.get("progress_script") or ""),
            stall_s=_stall_s(value.get("stall_s")),
        )
    except WireError:
        raise
    except KeyError as err:
        raise WireError(f"supervisor spec: no field {err}") from None
    except (TypeError, ValueError, HaloError) as err:
        raise WireError(f"supervisor spec: a malformed field ({err})") from None


# -- the supervisor's state file (supervise-CLUSTER.json beside the spec) ------------------
STATE_VERSION = 1


@dataclass(frozen=True)
class Change:
    """One change of state, as the history keeps it."""

    at: float
    state: str
    cause: str | None

    def to_dict(self) -> JsonObject:
        return {"at": self.at, "state": self.state, "cause": self.cause}


@dataclass(frozen=True)
class LastProbe:
    """The latest round of probes: /health on the head, and a one-token generation."""

    at: float
    health: bool
    generated: bool
    latency_s: float | None
    detail: str | None

    def to_dict(self) -> JsonObject:
        return {"at": self.at, "health": self.health, "generated": self.generated,
                "latency_s": self.latency_s, "detail": self.detail}  # fmt: skip


@dataclass
class SupervisorState:
    """What the supervisor on the head writes at every change and every round (atomically,
    0600), and ``halo status``, ``halo serve`` and the exporter read back. ``nodes``: each
    member as the last round saw it (``supervision.MemberProbe``'s fields but its name);
    ``proof``/``proof_log``: the last restart's counters and log witnesses."""

    cluster: str
    engine: str
    model: str
    pid: int
    settings: SuperviseSettings
    state: str
    since: float
    started_at: float
    serving_since: float | None = None
    restarts: int = 0  # that brought it back
    attempts: int = 0  # restarts tried, those that failed included
    cause: str | None = None
    last_probe: LastProbe | None = None
    nodes: dict[str, JsonObject] = field(default_factory=dict)
    history: list[Change] = field(default_factory=list)
    proof: JsonObject | None = None
    proof_log: JsonObject | None = None
    proof_tokens: JsonObject | None = None  # the last restart's token witness

    def to_dict(self) -> JsonObject:
        return {
            "version": STATE_VERSION,
            "cluster": self.cluster,
            "engine": self.engine,
            "model": self.model,
            "pid": self.pid,
            "state": self.state,
            "since": self.since,
            "serving_since": self.serving_since,
            "started_at": self.started_at,
            "restarts": self.restarts,
            "attempts": self.attempts,
            "cause": self.cause,
            "last_probe": None if self.last_probe is None else self.last_probe.to_dict(),
            "nodes": dict(self.nodes),
            "history": [c.to_dict() for c in self.history],
            "settings": self.settings.to_dict(),
            **({"proof": self.proof} if self.proof is not None else {}),
            **({"proof_log": self.proof_log} if self.proof_log is not None else {}),
            **({"proof_tokens": self.proof_tokens} if self.proof_tokens is not None else {}),
        }


def _optional_number(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WireError(f"supervisor state: {where} is not a number")
    return float(value)


def _optional_text(value: Any) -> str | None:
    return None if value is None else str(value)


def parse_state(value: Any) -> SupervisorState:
    """The state file as the supervisor wrote it (parsed JSON)."""
    if not isinstance(value, dict) or value.get("version") != STATE_VERSION:
        raise WireError(f"not a supervisor state of version {STATE_VERSION}")
    try:
        probe = value.get("last_probe")
        nodes = value.get("nodes") or {}
        proof, proof_log = value.get("proof"), value.get("proof_log")
        proof_tokens = value.get("proof_tokens")
        if not isinstance(nodes, dict) or not all(isinstance(v, dict) for v in nodes.values()):
            raise WireError("supervisor state: nodes is not an object of objects")
        return SupervisorState(
            cluster=str(value["cluster"]),
            engine=str(value.get("engine") or ""),
            model=str(value.get("model") or ""),
            pid=int(value.get("pid") or 0),
            settings=_settings(value.get("settings"), "supervisor state"),
            state=str(value["state"]),
            since=float(value.get("since") or 0.0),
            started_at=float(value.get("started_at") or 0.0),
            serving_since=_optional_number(value.get("serving_since"), "serving_since"),
            restarts=int(value.get("restarts") or 0),
            attempts=int(value.get("attempts") or 0),
            cause=_optional_text(value.get("cause")),
            last_probe=None
            if probe is None
            else LastProbe(
                float(probe["at"]),
                bool(probe.get("health")),
                bool(probe.get("generated")),
                _optional_number(probe.get("latency_s"), "the probe's latency_s"),
                _optional_text(probe.get("detail")),
            ),
            nodes={str(k): dict(v) for k, v in nodes.items()},
            history=[
                Change(float(c["at"]), str(c["state"]), _optional_text(c.get("cause")))
                for c in value.get("history") or []
            ],
            proof=proof if isinstance(proof, dict) else None,
            proof_log=proof_log if isinstance(proof_log, dict) else None,
            proof_tokens=proof_tokens if isinstance(proof_tokens, dict) else None,
        )
    except WireError:
        raise
    except KeyError as err:
        raise WireError(f"supervisor state: no field {err}") from None
    except (TypeError, ValueError, AttributeError, HaloError) as err:
        raise WireError(f"supervisor state: a malformed field ({err})") from None
