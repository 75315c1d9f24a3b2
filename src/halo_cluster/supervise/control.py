"""The controller's side of supervision (``node/supervisor.py`` is the supervisor itself).

``halo serve`` runs the engine's start plan (``engines.start``); once the server is proven
it leaves a supervisor on the head
(``install``): a key of the head's own (made there, never leaving it) authorized on every
other member for this server, the spec (the members, the start plan's steps, the probe and stop
scripts, the API key) written 0600 into the head's state directory, and the supervisor
started through the node code: a systemd unit where the head runs systemd, else a detached
process (``service``). The install waits for the supervisor's first round
of probes, so a head that cannot reach a member over SSH is one line at serve time, not a
silent gap later. ``halo stop`` stops the supervisor first (``stop``), then the server, then
takes the key off the members and the spec (it holds the API key) off the head (``forget``).
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, replace

from halo_cluster.bounded.jsonin import loads
from halo_cluster.client.fanout import each
from halo_cluster.client.node import NodeClient, escaped
from halo_cluster.cluster.handle import Cluster
from halo_cluster.cluster.proof import counters_call, mgmt_address
from halo_cluster.config import NodeConfig
from halo_cluster.engines import scripts
from halo_cluster.engines.protocol import Prepared, ServeContext, find_engine
from halo_cluster.errors import LifecycleError, WireError
from halo_cluster.jsonout import JsonObject
from halo_cluster.ray.auth import ray_env
from halo_cluster.ray.lifecycle import ray_start_path
from halo_cluster.runner.local import LocalRunner
from halo_cluster.runner.quote import exports
from halo_cluster.supervise import service
from halo_cluster.wire.args import ray_nodes_args, supervise_args
from halo_cluster.wire.recheck import Recheck
from halo_cluster.wire.supervise import (
    Member,
    Spec,
    SshTarget,
    Step,
    SupervisorState,
    TokenCheck,
    parse_state,
)

ROLE = service.ROLE
FIRST_ROUND_S = 90.0  # the supervisor's first round of probes must be written within this


# -- install ----------------------------------------------------------------------------------
def state_dir(client: NodeClient) -> str:
    """halo's state directory on the node, expanded there (0700, created when missing)."""
    found = client.script(f"mkdir -p {scripts.STATE_DIR} && chmod 700 {scripts.STATE_DIR} && "
                          f"printf %s {scripts.STATE_DIR}\n")  # fmt: skip
    path = found.stdout.strip()
    if not found.ok or not path.startswith("/"):
        raise LifecycleError(
            f"{client.name}: no state directory for the supervisor: {found.error_text()}"
        )
    return path


def key_tag(cluster: Cluster) -> str:
    """The comment that marks the supervisor's key in a member's authorized_keys."""
    return f"halo-supervise:{cluster.config.name}@{cluster.head.name}"


def _head_key(cluster: Cluster, base: str) -> str:
    """The head's own key for reaching the members (made once, kept 0600 on the head)."""
    key = f"{base}.key"
    made = cluster.client(cluster.head).script(
        exports({"HALO_KEY_PATH": key, "HALO_TAG": key_tag(cluster)}) + "set -e\numask 077\n"
        "command -v ssh-keygen >/dev/null || { echo 'no ssh-keygen on this node' >&2; exit 4; }\n"
        '[ -f "$HALO_KEY_PATH" ] || '
        'ssh-keygen -q -t ed25519 -N "" -C "$HALO_TAG" -f "$HALO_KEY_PATH" </dev/null\n'
        'cat "$HALO_KEY_PATH.pub"\n'
    )
    line = made.stdout.strip()
    if not made.ok or not line.startswith("ssh-"):
        raise LifecycleError(
            f"{cluster.head.name}: could not make the supervisor's SSH key: {made.error_text()} "
            "(install openssh-client there, or serve with --no-supervise)"
        )
    return line


# A member's authorized_keys (the file a link leads to, the link kept): sshd reads it at
# every login, so it is never rewritten in place (a kill mid-write left half the keys). The
# new keys go to a temporary file beside it, flushed, then one rename: the old keys or the
# new ones, never part of either.
_KEYS_FILE = 'f="$HOME/.ssh/authorized_keys"\n[ -L "$f" ] && f="$(readlink -f -- "$f")"\n'
_OTHER_KEYS = 'grep -vF -- "$HALO_TAG" "$f"'
_REPLACE_KEYS = (
    't="$(mktemp "$f.halo-XXXXXX")"\ntrap \'rm -f -- "$t"\' EXIT\n'
    '{{ {keep} || true; {add}; }} > "$t"\n'
    'sync -- "$t" 2>/dev/null || true\nmv -f -- "$t" "$f"\ntrap - EXIT\n'
)


def _authorize(cluster: Cluster, member: NodeConfig, key_line: str) -> None:
    """The head's key in the member's ~/.ssh/authorized_keys, from the head's addresses only."""
    head = cluster.head
    sources = [a for a in (mgmt_address(head), head.fabric_address) if a]
    restrict = (
        f'from="{",".join(sources)}",no-agent-forwarding,no-port-forwarding ' if sources else ""
    )
    script = exports({"HALO_TAG": key_tag(cluster), "HALO_KEY": restrict + key_line}) + (
        "set -e\numask 077\nmkdir -p \"$HOME/.ssh\"\n" + _KEYS_FILE + 'touch "$f"\n'
        + _REPLACE_KEYS.format(keep=_OTHER_KEYS, add='printf "%s\\n" "$HALO_KEY"')
    )  # fmt: skip
    done = cluster.client(member).script(script)
    if not done.ok:
        raise LifecycleError(
            f"{member.name}: could not authorize the supervisor's key: {done.error_text()}"
        )


def _ssh_target(cluster: Cluster, node: NodeConfig) -> SshTarget:
    """Where the head reaches ``node`` over SSH: the host, user and port this machine's ssh
    config gives its target (``ssh -G``), so an alias resolves to its address."""
    config = cluster.config.ssh_config
    argv = ["ssh", "-G", *(["-F", str(config)] if config else []), node.ssh]
    found = LocalRunner().run(argv, stdin="", timeout=10)
    values: dict[str, str] = {}
    for line in found.stdout.splitlines():
        key, _sep, value = line.partition(" ")
        values.setdefault(key.lower(), value.strip())
    host = values.get("hostname") or node.host
    return SshTarget(host, values.get("user"), int(values.get("port") or 22))


def make_spec(
    cluster: Cluster,
    ctx: ServeContext,
    prepared: Prepared,
    steps: list[Step],
    targets: dict[str, SshTarget],
    recheck: Recheck | None = None,
    tokens: TokenCheck | None = None,
) -> Spec:
    """The supervisor's spec (``wire.supervise``, read back by ``node/supervisor.py``); it
    holds the API key."""
    name, head = cluster.config.name, cluster.head
    ray = find_engine(ctx.request.engine).uses_ray(ctx.request.options)
    runs = {m.name for m in prepared.members}
    counted = {n.name for n in prepared.witnesses}
    members = []
    for node in _members(prepared):
        plan = ctx.plans.get(node.name)
        counters = None
        if node.name in counted and plan is not None:
            counters = ctx.client(node).command(*counters_call(node, plan))
        remote = node.name != head.name
        members.append(
            Member(
                node.name,
                targets[node.name] if remote else None,
                tuple(node.exec_prefix),
                (plan.address if plan else None) if remote else None,
                tuple(counters) if counters is not None else None,
                node.name in runs,
                node.address if ray else None,
            )
        )
    serve = ctx.request.serve
    spec = Spec(
        cluster=name,
        head=head.name,
        engine=ctx.request.engine,
        model=ctx.request.model,
        host=serve.host,
        port=serve.port,
        api_key=ctx.api_key,
        rdma=prepared.rdma,
        allow_fallback=ctx.request.allow_fallback,
        settings=serve.supervise,
        members=tuple(members),
        start=tuple(steps),
        probe_script=scripts.probe_script(name),
        stop_script=scripts.stop_script(name),
        log_tail_script=scripts.log_tail_script(name),
        log_script=scripts.log_script(name),
        recheck=recheck,
        tokens=tokens,
        progress_script=scripts.progress_script(name),
        stall_s=serve.stall_s,
    )
    return _with_ray(spec, cluster, ctx, prepared) if ray else spec


def _with_ray(spec: Spec, cluster: Cluster, ctx: ServeContext, prepared: Prepared) -> Spec:
    """For a server on Ray: how a member's raylet is checked, started again (the node's own
    script from 'halo up') and waited for (Ray's table on the head)."""
    path = ray_start_path(cluster.config.name)
    addresses = [n.address for n in _members(prepared)]
    wait = ctx.client(cluster.head).command(*ray_nodes_args(wait=addresses, timeout=150))
    return replace(
        spec,
        ray_check_script="if pgrep -f raylet >/dev/null 2>&1; then echo ray=1; "
        "else echo ray=0; fi\n",
        ray_start_script=f"[ -f {path} ] || {{ echo 'no Ray start script from halo up "
        f"here' >&2; exit 4; }}\nbash {path}\n",
        ray_wait=tuple(wait),
        ray_env_script=exports(ray_env(cluster.config)),
    )


def _members(prepared: Prepared) -> list[NodeConfig]:
    """The nodes running the engine, then those whose counters witness (Ray's ranks)."""
    seen: dict[str, NodeConfig] = {}
    for node in [*prepared.members, *prepared.witnesses]:
        seen.setdefault(node.name, node)
    return list(seen.values())


def install(
    cluster: Cluster,
    ctx: ServeContext,
    prepared: Prepared,
    steps: list[Step],
    recheck: Recheck | None = None,
    tokens: TokenCheck | None = None,
) -> Installed:
    """Leave the supervisor on the head; its first round of probes, as it wrote it. It proves
    a restart by the witnesses this start was proven by: the engine's log (``recheck``), the
    tokens against the one-node reference (``tokens``), the counters."""
    head = cluster.head
    client = cluster.client(head)
    base = f"{state_dir(client)}/{ROLE}-{cluster.config.name}"
    remote = [n for n in _members(prepared) if n.name != head.name]
    targets: dict[str, SshTarget] = {}
    if remote:
        cluster.progress(
            f"supervisor: authorizing {head.name}'s key on {', '.join(n.name for n in remote)}"
        )
        key_line = _head_key(cluster, base)
        each(remote, lambda n: _authorize(cluster, n, key_line))
        targets = {n.name: _ssh_target(cluster, n) for n in remote}
    spec = make_spec(cluster, ctx, prepared, steps, targets, recheck, tokens).to_json()
    end = f"HALO_SPEC_{secrets.token_hex(8)}"  # a heredoc's end that the JSON cannot hold
    written = client.script(
        f"set -e\numask 077\ncat > {json.dumps(base + '.spec.json')} <<'{end}'\n{spec}\n{end}\n"
        f"rm -f {json.dumps(base + '.json')}\n"
    )
    if not written.ok:
        raise LifecycleError(
            f"{head.name}: could not write the supervisor's spec: {written.error_text()}"
        )
    argv = client.command(*supervise_args(base + ".spec.json"))
    started = client.script(service.start_script(cluster.config.name, argv, base), 120)
    mode = started.stdout.strip().rpartition("mode=")[2]
    if not started.ok or mode not in service.MODES:
        raise LifecycleError(f"{head.name}: could not start the supervisor: {started.error_text()}")
    how = "detached" if mode == "detached" else service.unit_name(cluster.config.name)
    cluster.progress(
        f"supervisor: started on {head.name} ({how}), waiting for its first round of probes"
    )
    first = _first_round(cluster)
    assert first.state is not None  # _first_round returns a state with a probe
    return Installed(head.name, mode, first.state)


def _first_round(cluster: Cluster) -> SupervisorStatus:
    deadline = time.monotonic() + FIRST_ROUND_S
    while time.monotonic() < deadline:
        found = status(cluster)
        if found is not None and not found.running:
            raise LifecycleError(
                f"the supervisor on {cluster.head.name} exited: {tail(cluster, 3)}"
            )
        if found is not None and found.state is not None and found.state.last_probe:
            nodes = found.state.nodes
            lost = {n: v for n, v in nodes.items() if not v.get("reachable")}
            if lost:
                name, why = next(iter(lost.items()))
                raise LifecycleError(
                    f"the supervisor on {cluster.head.name} cannot reach {name} over SSH "
                    f"({escaped(str(why.get('error')))}); serve with --no-supervise to skip it"
                )
            return found
        time.sleep(1.0)
    raise LifecycleError(
        f"the supervisor on {cluster.head.name} wrote no probe within {FIRST_ROUND_S:g} s: "
        f"{tail(cluster, 3)}"
    )


@dataclass(frozen=True)
class Installed:
    """The supervisor 'halo serve' left on the head: where, how it runs ("detached" or the
    systemd unit), and its first round of probes."""

    node: str
    service: str
    first: SupervisorState

    def to_dict(self) -> JsonObject:
        """The ``supervisor`` object of 'halo serve --json'."""
        probe = self.first.last_probe
        return {
            "state": self.first.state,
            "pid": self.first.pid,
            "node": self.node,
            "service": self.service,
            "interval_s": self.first.settings.interval_s,
            "probe_latency_s": None if probe is None else probe.latency_s,
        }


# -- a running supervisor --------------------------------------------------------------------
@dataclass(frozen=True)
class SupervisorStatus:
    """The supervisor on the head as the controller finds it: whether its process runs, and
    its state file (None with ``problem`` when the file cannot be read)."""

    running: bool
    state: SupervisorState | None
    problem: str | None = None

    def to_dict(self) -> JsonObject:
        if self.state is None:
            return {"running": self.running, "state": "unknown", "cause": self.problem}
        return {**self.state.to_dict(), "running": self.running}


def status(cluster: Cluster) -> SupervisorStatus | None:
    """The supervisor's state on the head, with whether its process runs; None when no
    supervisor ever ran for this cluster there."""
    name = cluster.config.name
    _log, pid = scripts.log_paths(name, ROLE)
    state = f"{scripts.STATE_DIR}/{ROLE}-{name}.json"
    found = cluster.client(cluster.head).script(
        f'if kill -0 "$(cat {pid} 2>/dev/null)" 2>/dev/null; then echo running; '
        f"else echo stopped; fi\ncat {state} 2>/dev/null || true\n",
        timeout=30,
    )
    if not found.ok:
        return None
    running, _sep, text = found.stdout.partition("\n")
    if not text.strip():
        return None
    try:
        return SupervisorStatus(running == "running", parse_state(loads(text)))
    except (ValueError, WireError) as err:
        return SupervisorStatus(running == "running", None, f"unreadable state file ({err})")


def tail(cluster: Cluster, lines: int = 200) -> str:
    log, _pid = scripts.log_paths(cluster.config.name, ROLE)
    found = cluster.client(cluster.head).script(f"tail -n {int(lines)} {log} 2>/dev/null\n")
    return found.stdout.strip() or "its log is empty"


def stop(cluster: Cluster) -> bool:
    """Stop the supervisor on the head (before the server: a stop never races a restart)."""
    return cluster.client(cluster.head).script(service.stop_script(cluster.config.name), 90).ok


def forget(cluster: Cluster) -> None:
    """The supervisor's key off every other node, its spec (with the API key) off the head."""
    head, tag = cluster.head, key_tag(cluster)
    script = exports({"HALO_TAG": tag}) + (
        "set -e\numask 077\n" + _KEYS_FILE + '[ -f "$f" ] || exit 0\n'
        'grep -qF -- "$HALO_TAG" "$f" || exit 0\n'
        + _REPLACE_KEYS.format(keep=_OTHER_KEYS, add=":")
    )  # fmt: skip
    others = [n for n in cluster.config.nodes if n.name != head.name]
    each(others, lambda n: cluster.client(n).script(script, 30))
    base = f"{scripts.STATE_DIR}/{ROLE}-{cluster.config.name}"
    cluster.client(head).script(f"rm -f {base}.spec.json {service.wrapper_path(base)}\n", 30)
