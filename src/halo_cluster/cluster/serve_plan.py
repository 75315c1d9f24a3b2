"""What ``halo serve`` runs where (pure): the ranks' placement over the nodes, vLLM's argv
for each executor, and the node-side scripts (start in the background, preflight, stop
and clean up). Scripts go to ``bash -s``; every value in them is quoted."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from halo_cluster.config import NodeConfig, ServeConfig
from halo_cluster.errors import UsageError
from halo_cluster.runner.quote import exports

STATE_DIR = '"${XDG_STATE_HOME:-$HOME/.local/state}/halo"'


@dataclass(frozen=True)
class Placement:
    """A node that takes ranks: its ``--node-rank`` (mp) and how many ranks it holds."""

    node: NodeConfig
    node_rank: int
    ranks: int


def placement(
    nodes: Sequence[NodeConfig], capacity: Mapping[str, int], world: int, option: str
) -> list[Placement]:
    """Fill the nodes in config order (the head first), each up to its capacity (GPUs, or
    one engine rank on a CPU-only node). ``option`` names the flag in the error."""
    offered = sum(capacity.get(n.name, 0) for n in nodes)
    if world > offered:
        shown = ", ".join(f"{n.name} {capacity.get(n.name, 0)}" for n in nodes)
        raise UsageError(
            f"{option}: the cluster offers {offered} engine rank(s) ({shown}); "
            "lower it or add nodes"
        )
    placed: list[Placement] = []
    left = world
    for node in nodes:
        if left == 0:
            break
        take = min(left, capacity.get(node.name, 0))
        if take:
            placed.append(Placement(node, len(placed), take))
            left -= take
    return placed


def serve_argv(
    serve: ServeConfig,
    model: str,
    tp: int,
    unified_memory: bool,
    mp: tuple[int, int, str, int] | None = None,
) -> list[str]:
    """``vllm serve``. ``mp``: (node rank, nodes, master address, master port) for vLLM's
    own multi-node executor; node ranks above 0 run headless (no API server)."""
    argv = [
        *shlex.split(serve.command),
        "serve",
        model,
        "--tensor-parallel-size",
        str(tp),
        "--pipeline-parallel-size",
        str(serve.pipeline_parallel_size),
        "--distributed-executor-backend",
        "mp" if mp else "ray",
    ]
    if mp is not None:
        node_rank, nnodes, master, port = mp
        argv += ["--nnodes", str(nnodes), "--node-rank", str(node_rank)]
        argv += ["--master-addr", master, "--master-port", str(port)]
        if node_rank > 0:
            argv.append("--headless")
    if mp is None or mp[0] == 0:
        argv += ["--host", serve.host, "--port", str(serve.port)]
    utilization = serve.gpu_memory_utilization or (0.90 if unified_memory else None)
    if utilization is not None:
        argv += ["--gpu-memory-utilization", f"{utilization:g}"]
    if serve.enforce_eager if serve.enforce_eager is not None else unified_memory:
        argv.append("--enforce-eager")
    if serve.max_model_len:
        argv += ["--max-model-len", str(serve.max_model_len)]
    if serve.max_num_seqs:
        argv += ["--max-num-seqs", str(serve.max_num_seqs)]
    return [*argv, *serve.extra_args]


def local_host(host: str) -> str:
    """Where a server bound to ``host`` is reached from its own node."""
    return "127.0.0.1" if host == "0.0.0.0" else host


def log_paths(cluster: str) -> tuple[str, str]:
    """(log, pid file) on a node, as shell words (the state dir expands there)."""
    name = shlex.quote(cluster)  # validated, but quoted all the same
    return f"{STATE_DIR}/serve-{name}.log", f"{STATE_DIR}/serve-{name}.pid"


def alive_script(cluster: str) -> str:
    """Exit 0 when the program 'halo serve' started on a node (its pid file) still runs."""
    _log, pid = log_paths(cluster)
    return f'kill -0 "$(cat {pid} 2>/dev/null)" 2>/dev/null\n'


def background_script(env: Mapping[str, str], argv: list[str], cluster: str) -> str:
    """Start ``argv`` detached in its own process group, its output in the log, its pid
    in the pid file; the working directory is HOME (a node's caches and state live there)."""
    log, pid = log_paths(cluster)
    return (
        f"set -e\n{exports(env)}mkdir -p {STATE_DIR}\ncd\n"
        f"setsid {shlex.join(argv)} > {log} 2>&1 < /dev/null &\n"
        f"echo $! > {pid}\n"
    )


# exit codes of the preflight script, and what each means
PREFLIGHT = {
    10: "the engine command {command} is not installed there: build the engine environment "
    "('make engine') or set [serve] command",
    11: "the model {model} is not there (no config.json): put it at the same path on every "
    "node, or serve a shared path",
    12: "port {port} is already in use there: stop what listens on it, or pick --port",
}


def is_local_model(model: str) -> bool:
    """A directory (absolute or relative) rather than a hub id like ``org/name``."""
    return model.startswith(("/", "./", "../", "~"))


def tcp_probe(host: str, port: int) -> str:
    """A shell condition, true when ``host:port`` accepts a TCP connection within 2 s. The
    host and port reach the inner bash as arguments, never as code."""
    return (
        f"timeout 2 bash -c 'exec 3<>\"/dev/tcp/$1/$2\"' _ {shlex.quote(host)} "
        f"{shlex.quote(str(port))} 2>/dev/null"
    )


def preflight_script(command: str, model: str | None, port: tuple[str, int] | None) -> str:
    """Exit 0 when the node can take its part; else one of ``PREFLIGHT``'s codes."""
    exe = shlex.split(command)[0] if command.strip() else "vllm"
    lines = [f"command -v {shlex.quote(exe)} >/dev/null 2>&1 || exit 10"]
    if model is not None:
        lines.append(f"test -f {shlex.quote(model)}/config.json || exit 11")
    if port is not None:
        lines.append(f"if {tcp_probe(*port)}; then exit 12; fi")
    return "".join(line + "\n" for line in lines) + "exit 0\n"


def stop_script(cluster: str) -> str:
    """Stop the server's process group (TERM, then KILL after 5 s), then remove the
    shared-memory segments it left: those made since it started that no process still
    has open or mapped. Exit 3 when nothing was running."""
    _log, pid = log_paths(cluster)
    return (
        f"pidfile={pid}\n"
        'p="$(cat "$pidfile" 2>/dev/null)" || exit 3\n'
        'ran=3; if kill -0 "$p" 2>/dev/null; then ran=0; fi\n'
        'kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true\n'
        'for i in $(seq 50); do kill -0 -- "-$p" 2>/dev/null || break; sleep 0.1; done\n'
        'kill -KILL -- "-$p" 2>/dev/null || true\n'
        # Ray's worker processes that ran the ranks end with their driver: wait for them.
        # Ray also leaves an idle worker it started for the server's job: end those that
        # were started after the server (never older ones, which are not the server's).
        'for i in $(seq 50); do pgrep -f "RayWorkerProc|RayWorkerWrapper" >/dev/null || break; '
        "sleep 0.1; done\n"
        'since=$(( $(date +%s) - $(stat -c %Y "$pidfile") + 1 ))\n'
        "for q in $(pgrep -f '^ray::IDLE'); do\n"
        '  age=$(ps -o etimes= -p "$q" 2>/dev/null | tr -d " ")\n'
        '  if [ -n "$age" ] && [ "$age" -le "$since" ]; then kill -TERM "$q" 2>/dev/null; fi\n'
        "done\n"
        "for f in /dev/shm/*; do\n"
        '  [ -f "$f" ] && [ "$f" -nt "$pidfile" ] || continue\n'
        '  if ! grep -qsF "$f" /proc/[0-9]*/maps && ! ls -l /proc/[0-9]*/fd 2>/dev/null | '
        'grep -qF "$f"; then rm -f "$f"; fi\n'
        "done\n"
        'rm -f "$pidfile"\n'
        "exit $ran\n"
    )
