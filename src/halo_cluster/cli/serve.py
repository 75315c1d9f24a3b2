"""``halo serve``, ``halo stop``, ``halo logs`` (and the node-side ``halo serve-health``)."""

from __future__ import annotations

import sys
import time

import click

from halo_cluster import engine_registry
from halo_cluster.cli.options import choice_option, config_option
from halo_cluster.cli.output import plain
from halo_cluster.engines.protocol import REFERENCE_MODES
from halo_cluster.engines.vllm_argv import EXECUTORS
from halo_cluster.jsonout import emit_json


def _serving(  # type: ignore[no-untyped-def]
    config_path: str | None, quiet: bool, deployment: str | None = None, replica: int = 0
):
    """The cluster's own server, or replica ``replica`` of ``deployment``."""
    from halo_cluster.cli.cluster import cluster_handle
    from halo_cluster.cluster.handle import Cluster
    from halo_cluster.deploy.units import deployment_unit
    from halo_cluster.serving.bringup import Serving

    cluster = cluster_handle(config_path, quiet)
    if deployment is None:
        return Serving(cluster)
    unit = deployment_unit(cluster.config, deployment, replica)
    clients = {n.name: cluster.clients[n.name] for n in unit.nodes}
    return Serving(Cluster(unit, clients, cluster.progress))


@click.command()
@click.argument("model", required=False)
@click.argument("extra", nargs=-1, type=click.UNPROCESSED, metavar="[-- EXTRA...]")
@config_option()
@click.option(
    "--tp", type=click.IntRange(1, 1024), help="Tensor-parallel size (default: one rank per node)."
)
@click.option(
    "--pp",
    type=click.IntRange(1, 1024),
    help="vLLM's pipeline-parallel size (default [serve.vllm] pipeline_parallel_size, 1).",
)
@click.option(
    "--nodes",
    type=click.IntRange(1, 1024),
    help="Serve on the first N nodes of halo.toml only (the head first; default every node).",
)
@choice_option(
    "--reference",
    choices=REFERENCE_MODES,
    default="auto",
    help="The token witness: auto compares 2 greedy answers with the one-node reference of "
    "this engine and model when one was recorded; full compares all 4; record (one node: "
    "--nodes 1) makes this start's answers the reference; off skips it.",
)
@click.option("--host", help="Address the API binds to (default [serve] host, 127.0.0.1).")
@click.option(
    "--port", type=click.IntRange(1, 65535), help="API port (default [serve] port, 8000)."
)
@click.option(
    "--allow-fallback", is_flag=True, help="Keep serving when NCCL fell back from RDMA to sockets."
)
@click.option(
    "--insecure", is_flag=True, help="Serve on an address other than loopback without an API key."
)
@click.option(
    "--force",
    is_flag=True,
    help="Serve even when the doctor finds blocking problems (engines without Ray, whose "
    "plans halo makes now; vLLM's ray executor uses what 'halo up' decided).",
)
@click.option(
    "--executor",
    type=click.Choice(EXECUTORS),
    help="vLLM's distributed executor (default [serve.vllm] executor, ray): ray places ranks "
    "as Ray actors (needs 'halo up'); mp runs one vLLM process per node (--nnodes/--node-rank), "
    "no Ray.",
)
@click.option(
    "--engine",
    type=click.Choice(engine_registry.names()),
    help="The engine (default [serve] engine, vllm): vllm runs tensor parallel; llama.cpp "
    "splits a GGUF model's layers over ggml-rpc-server workers, llama-server on the head.",
)
@click.option(
    "--wait", "wait_s", default=900.0, show_default=True, help="Seconds to wait for /health."
)
@click.option(
    "--no-supervise",
    is_flag=True,
    help="A one-off run: leave no supervisor on the head (by default one probes the server "
    "every few seconds and restarts the whole group after a crash, a wedge or a lost node; "
    "[serve.supervise] in halo.toml).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print {url, executor, ranks, engine, traffic, verdict, proven, problems, stopped} "
    "as JSON.",
)
def serve(
    model: str | None,
    extra: tuple[str, ...],
    config_path: str | None,
    tp: int | None,
    pp: int | None,
    nodes: int | None,
    reference: str,
    host: str | None,
    port: int | None,
    allow_fallback: bool,
    insecure: bool,
    force: bool,
    executor: str | None,
    engine: str | None,
    wait_s: float,
    no_supervise: bool,
    as_json: bool,
) -> int:
    """Start vLLM tensor-parallel (or llama.cpp over RPC, --engine) across the cluster,
    each node with its own transport plan (from 'halo up' for vLLM's ray executor; made
    from the nodes' facts, gated by the doctor, for llama.cpp and --executor mp: no Ray),
    wait for /health, send a warm-up request, then prove where the traffic went with two
    witnesses: the engine's own log (NCCL/RCCL's, or vLLM's Gloo lines: backend, rendezvous
    address, each rank's node) and every node's interface/RDMA counters during a probe
    request (bytes per generated token). When they show another path than the plan asked
    for, the server is stopped and halo exits 1 with the evidence (unless --allow-fallback).
    Ctrl-C while waiting stops what was started. Then a supervisor stays on the head
    (docs/supervise.md): it needs nothing from this machine, restarts the whole group in
    order after a crash or a wedge, brings it back after a lost node answers again, and
    stops in 'failed' after a crash loop; 'halo status' shows its state.

    Options for the engine itself follow '--' ('halo serve MODEL -- --enable-prefix-caching'),
    after [serve] extra_args and [serve.<engine>] args; those halo sets (host, port, parallel
    sizes, API key, executor, RPC workers) are refused, naming halo's own option."""
    from halo_cluster.engines.request import serve_request

    serving = _serving(config_path, as_json)
    request = serve_request(
        serving.config,
        model=model,
        engine=engine,
        host=host,
        port=port,
        tp=tp,
        pp=pp,
        executor=executor,
        nodes=nodes,
        reference=reference,
        wait_s=wait_s,
        allow_fallback=allow_fallback,
        insecure=insecure,
        force=force,
        supervise=not no_supervise,
        extra=extra,
    )
    result = serving.start(request)
    if as_json:
        emit_json(result.to_dict())
    else:
        _render(result, serving.head.name, request.engine)
    return 1 if result.stopped else 0


def _render(result, head: str, engine: str) -> None:  # type: ignore[no-untyped-def]
    from halo_cluster.engines.protocol import find_engine

    for line in find_engine(engine).describe(result.engine):
        click.echo(plain(line))
    for rank in result.ranks:
        click.echo(plain(f"  rank {rank['rank']} on {rank['node']} ({rank['address']})"))
    if result.verdict["transport"] != "unknown":
        click.echo(
            f"NCCL's log: {result.verdict['transport']}, networks {result.verdict['networks']}"
        )
        for line in result.verdict["evidence"][:6]:
            click.echo(f"  {plain(line)}")
    traffic = result.traffic
    if traffic.get("nodes"):
        click.echo(f"counters during a {traffic['tokens']}-token request:")
        for node, paths in traffic["nodes"].items():
            shown = ", ".join(
                f"{path} {v['name']} {_per_token(v['bytes_per_token'])}"
                for path, v in paths.items()
            )
            click.echo(plain(f"  {node}: {shown}"))  # interface names from the nodes
    if result.proven == "one node":
        click.echo("transport: none to prove (one node holds the whole model)")
    else:
        click.echo(f"transport proven: {result.proven or 'no'} (expected {result.expected})")
    click.echo(plain(tokens_line(result.tokens)))
    limited = [p for found in result.limits.values() for p in found.problems]
    for problem in result.problems:
        if problem not in limited:
            click.echo(f"  problem: {plain(problem)}", err=True)
    for found in result.limits.values():  # each node's limits with the fix for their owner
        for line in found.problems:
            click.echo(f"  problem: {plain(line)}", err=True)
        for note in found.notes:
            click.echo(f"  note: {plain(note)}", err=True)
        for line in found.fix:
            click.echo(f"    {plain(line)}", err=True)
    if result.stopped and limited and set(result.problems) <= set(limited):
        click.echo(
            "halo: error: the engine's limits fall short of the plan: server stopped "
            "(--allow-fallback keeps it)",
            err=True,
        )
    elif result.stopped and not result.tokens.get("problems"):
        click.echo(
            "halo: error: the evidence shows another path than the plan asked for: "
            "server stopped (--allow-fallback keeps it)",
            err=True,
        )
    elif result.stopped:
        click.echo(
            "halo: error: the layout's tokens differ from one node's: server stopped "
            "(check every node's copy of the model: halo model verify)",
            err=True,
        )
    else:
        click.echo(
            f"serving {plain(result.model)} at {result.url} (ready in {result.ready_s:g} s; "
            f"log {result.log} on {head})"
        )
        sup = result.supervisor
        if sup:
            how = "" if sup.get("service") in (None, "detached") else f"{sup['service']} unit, "
            click.echo(
                f"supervised from {sup['node']} ({how}pid {sup['pid']}, a probe every "
                f"{sup['interval_s']:g} s): halo status, halo logs --supervisor"
            )
        else:
            click.echo("not supervised (--no-supervise): nothing restarts it")


def tokens_line(tokens: dict) -> str:  # type: ignore[type-arg]
    """The token witness in one line."""
    if tokens.get("skipped"):
        return "tokens: not compared (--reference off)"
    if tokens.get("recorded"):
        return (
            f"tokens: recorded {tokens['recorded']}'s greedy answers to {tokens['prompts']} "
            f"prompts ({tokens['tokens']} tokens each) as the one-node reference"
        )
    if "ok" not in tokens:
        return (
            "tokens: no one-node reference for this engine and model yet "
            "(record one: halo serve MODEL --nodes 1 --reference record)"
        )
    drift = tokens.get("drift_nats")
    moved = "" if drift is None else f", log-probabilities within {drift:g} nats"
    if not tokens["ok"]:
        return (
            f"tokens: DIFFERENT from the one-node reference ({tokens['reference']}) "
            f"on {len(tokens['problems'])} of {len(tokens['prompts'])} prompt(s)"
        )
    ties = tokens.get("near_ties") or 0
    parted = f", {ties} parted at a near tie" if ties else ""
    return (
        f"tokens: the same as the one-node reference ({tokens['reference']}) on "
        f"{len(tokens['prompts'])} prompt(s){moved}{parted} (tolerance "
        f"{tokens['tolerance_nats']:g} nats)"
    )


def _per_token(value: float | None) -> str:
    if value is None:
        return "? B/token"
    return f"{value / 1024:.1f} KiB/token" if value >= 1024 else f"{value:.0f} B/token"


@click.command()
@click.argument("name", required=False)
@config_option()
@click.option("--json", "as_json", is_flag=True, help="Print {stopped: [names], server} as JSON.")
def stop(name: str | None, config_path: str | None, as_json: bool) -> int:
    """Stop deployment NAME ('halo run --name'), the others left serving; without NAME,
    every deployment and the server 'halo serve' started (every engine, on every node)."""
    from halo_cluster.cli.cluster import cluster_handle
    from halo_cluster.deploy.stop import stop_all, stop_deployment

    cluster = cluster_handle(config_path, True)
    out = stop_deployment(cluster, name) if name else stop_all(cluster)
    if as_json:
        emit_json(out.to_dict())
        return 0
    for stopped in out.stopped:
        click.echo(f"deployment {stopped} stopped")
    if not name:
        click.echo("server stopped" if out.server else "no server was running")
    return 0


@click.command()
@config_option()
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines (Ctrl-C to stop).")
@click.option("-n", "--lines", default=200, show_default=True, help="Lines to show first.")
@click.option("--node", help="The node whose log to show (default the head; mp executor only).")
@click.option("--supervisor", is_flag=True, help="The supervisor's log on the head instead.")
@click.option("--name", "deployment", help="A deployment's replica ('halo run --name').")
@click.option(
    "--replica", default=0, show_default=True, type=click.IntRange(0, 31), help="With --name."
)
def logs(
    config_path: str | None,
    follow: bool,
    lines: int,
    node: str | None,
    supervisor: bool,
    deployment: str | None,
    replica: int,
) -> int:
    """Show the server's log on the head (or on --node), or the supervisor's; with --name,
    those of a deployment's replica (its first node, or --node)."""
    server = _serving(config_path, True, deployment, replica)
    if supervisor:
        from halo_cluster.supervise import control

        sys.stdout.write(plain(control.tail(server.cluster, lines)) + "\n")
        return 0
    member = server.config.node(node) if node else server.head
    text = server.tail(lines, member)
    sys.stdout.write(plain(text))  # the log is the engine's text: its escapes are shown
    if not follow:
        return 0
    offset = len(server.log_from(0, member).encode())
    try:
        while True:
            time.sleep(1.0)
            new = server.log_from(offset, member)
            if new:
                sys.stdout.write(plain(new))
                sys.stdout.flush()
                offset += len(new.encode())
    except KeyboardInterrupt:
        return 0
