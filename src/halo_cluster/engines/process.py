"""The engine's processes on a node, run through its client: started, asked whether they
still run, read, and stopped (the scripts are ``engines.scripts``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from halo_cluster.client.fanout import each
from halo_cluster.client.node import NodeClient
from halo_cluster.engines.scripts import (
    alive_script,
    log_paths,
    log_script,
    stop_script,
)
from halo_cluster.engines.start import Launch, StartPlan, ready_step, start_step
from halo_cluster.errors import LifecycleError


def run_plan(
    clients: Mapping[str, NodeClient],
    plan: StartPlan,
    cluster: str,
    head: str,
    progress: Callable[[str], None],
) -> None:
    """Run an engine's start plan: stage after stage, every launch of a stage at once, each
    waited for where it says how (the steps the supervisor replays: ``start_steps``)."""

    def one(launch: Launch) -> None:
        if launch.title:
            progress(launch.title)
        client = clients[launch.node]
        step = start_step(launch, cluster)
        started = client.script(step.stdin or "", step.timeout_s)
        if not started.ok:
            raise LifecycleError(
                f"could not start {launch.role} on {launch.node}: {started.error_text()}"
            )
        if launch.ready is None:
            return
        wait = ready_step(launch.ready, head)
        if not clients[head].script(wait.stdin or "", wait.timeout_s).ok:
            line = "it does not answer" if alive(client, cluster) else fatal_line(client, cluster)
            raise LifecycleError(
                f"{launch.node}: {launch.role} is not reachable at {launch.ready.endpoint} "
                f"from {head}: {line}"
            )

    for stage in plan.stages:
        each(list(stage), one, settle=True)  # Ctrl-C: the stop that follows sees every start


def alive(client: NodeClient, cluster: str, timeout: float = 60.0) -> bool:
    return client.script(alive_script(cluster), timeout).ok


def log_text(client: NodeClient, cluster: str) -> str:
    return client.script(log_script(cluster), timeout=120).stdout


def tail(client: NodeClient, cluster: str, lines: int) -> str:
    log, _pid = log_paths(cluster)
    return client.script(f"tail -n {int(lines)} {log}\n").stdout


def log_from(client: NodeClient, cluster: str, offset: int) -> str:
    log, _pid = log_paths(cluster)
    return client.script(f"tail -c +{int(offset) + 1} {log} 2>/dev/null\n").stdout


def log_path(client: NodeClient, cluster: str) -> str:
    """The log file's path on the node, expanded there."""
    log, _pid = log_paths(cluster)
    return client.script(f"echo {log}\n").stdout.strip() or log


def stop(client: NodeClient, cluster: str) -> bool:
    """Stop what 'halo serve' started on this node; True when something was running."""
    return client.script(stop_script(cluster), 60).ok


def fatal_line(client: NodeClient, cluster: str) -> str:
    """The line of the log that says why the engine stopped (else its last lines)."""
    from halo_cluster.witness.engine_log import clean

    lines = [clean(line).strip() for line in log_text(client, cluster).splitlines()]
    lines = [line for line in lines if line]
    for line in reversed(lines):
        said = "Error" in line or "refuses" in line or line.startswith("Failed to")
        if said and not line.startswith("File "):
            return line[-400:]
    return " | ".join(lines[-3:])[-400:] or "its log is empty"
