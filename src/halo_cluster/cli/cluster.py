"""``halo up``, ``halo status``, ``halo down`` (the node side's ``ray-nodes`` is in
``halo_cluster.node``)."""

from __future__ import annotations

import time
from typing import Any

import click

from halo_cluster.cli.options import config_option, require_config
from halo_cluster.cli.output import styled, table
from halo_cluster.jsonout import JsonObject, emit_json
from halo_cluster.printable import printable


def cluster_handle(config_path: str | None, quiet: bool):  # type: ignore[no-untyped-def]
    """The cluster of ``--config``, reached over SSH; progress on stderr unless ``quiet``."""
    from halo_cluster.cluster.handle import Cluster

    config = require_config(config_path)
    return Cluster.over_ssh(config, None if quiet else lambda m: click.echo(f"  {m}", err=True))


def _lifecycle(config_path: str | None, quiet: bool):  # type: ignore[no-untyped-def]
    from halo_cluster.ray.lifecycle import Lifecycle

    return Lifecycle(cluster_handle(config_path, quiet))


@click.command()
@config_option()
@click.option("--force", is_flag=True, help="Start even when the doctor finds blocking problems.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print {started, already, nodes_alive, plans} as JSON."
)
def up(config_path: str | None, force: bool, as_json: bool) -> int:
    """Bring the Ray cluster up: doctor's blocking checks first, then each node's own transport
    plan in its environment, the head on its fabric address, workers one after another, and
    a wait until every node is registered. On a running cluster it changes nothing."""
    lifecycle = _lifecycle(config_path, as_json)
    start = time.monotonic()
    result = lifecycle.up(force=force)
    if as_json:
        emit_json(
            {
                "started": result.started,
                "already": result.already,
                "nodes_alive": result.nodes_alive,
                "plans": {name: plan.to_dict() for name, plan in result.plans.items()},
            }
        )
        return 0
    from halo_cluster.transport.render import rail_label

    for name, plan in result.plans.items():
        click.echo(printable(f"{name}: {plan.transport} via {rail_label(plan)} ({plan.address})"))
    started = ", ".join(result.started) or "nothing (already running)"
    took = time.monotonic() - start
    click.echo(f"Ray up on {len(result.nodes_alive)} node(s) in {took:.1f} s; started {started}")
    return 0


@click.command()
@config_option()
@click.option("--name", "deployment", help="Only this deployment ('halo run --name').")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print {cluster, head, nodes: [...], up_s, serve, gateway, deployments: [...]} as JSON.",
)
def status(config_path: str | None, deployment: str | None, as_json: bool) -> int:
    """Nodes alive per Ray, each node's transport, how long the cluster has been up, the
    served model's health, and the deployments with their replicas and the gateway (--name:
    one deployment). Exit 1 when a configured node is not in the Ray cluster (on a cluster
    served without Ray: when the server is not healthy), or a deployment is not serving."""
    from halo_cluster.serving.status import cluster_status

    cluster = cluster_handle(config_path, True)
    data = cluster_status(cluster)
    data.update(_deployments(cluster, deployment))
    if as_json:
        emit_json(data)
    else:
        from halo_cluster.cli.output import console

        grid = table(
            f"Cluster {data['cluster']} (head {data['head']})",
            "node",
            "address",
            "ray",
            "transport",
        )
        for node in data["nodes"]:
            grid.add_row(
                node["name"],
                node["address"],
                styled("[green]alive[/]" if node["ray"] else "[red]missing[/]"),
                f"{node['transport'] or '-'} {node['hca'] or ''}",
            )
        console().print(grid)
        _print_memory(data["nodes"])
        if data["serve"] is not None:
            _print_serve(data["serve"])
        if data["up_s"] is not None:
            click.echo(f"up {data['up_s']:.0f} s")
        _print_deployments(data)
    if any(d["state"] != "serving" for d in data["deployments"]):
        return 1
    ray_used = data["up_s"] is not None or any(n["ray"] for n in data["nodes"])
    if not ray_used and data["serve"] is not None:  # served without Ray: the server's health
        return 0 if data["serve"]["healthy"] else 1
    return 0 if all(n["ray"] for n in data["nodes"]) else 1


def _deployments(cluster: Any, name: str | None) -> JsonObject:
    """The deployments ('halo run --name'), or only ``name``, with their replicas, and the
    gateway (asked on the head only where there is something for it to front or it was
    given keys)."""
    from halo_cluster.deploy.view import deployments_view
    from halo_cluster.gateway import control

    deployments = deployments_view(cluster, name)
    used = deployments or control.keys_path(cluster.config).exists()
    return {
        "gateway": control.view(cluster).to_dict() if used else None,
        "deployments": [d.to_dict() for d in deployments],
    }


def _print_memory(nodes: list[dict[str, Any]]) -> None:
    """Each node's memory and who holds a large share of it: halo's own processes, and
    any other with how to stop it."""
    for node in nodes:
        memory = node.get("memory")
        if not memory:
            continue
        free = memory["available_gib"]
        click.echo(
            f"{node['name']}: {'?' if free is None else free} of {memory['total_gib']} GiB "
            "available"
        )
        for o in memory["owners"]:
            held = round(o["rss_gib"] + o["gtt_gib"], 1)
            whose = "halo's" if o["halo"] else f"not halo's: stop it with {o['stop']}"
            click.echo(f"  pid {o['pid']} ({printable(o['command'])}) holds {held} GiB "
                       f"({o['share_pct']} %), {whose}")  # fmt: skip


def _print_deployments(data: dict[str, Any]) -> None:
    gateway = data["gateway"]
    if gateway is not None:
        said = "running" if gateway["running"] else "NOT RUNNING ('halo gateway start')"
        click.echo(f"gateway {said} at {gateway['url']}")
    for deployment in data["deployments"]:
        click.echo(
            f"deployment {printable(deployment['name'])}: {printable(deployment['model'])} "
            f"{deployment['layout']} — {deployment['state']}"
        )
        for replica in deployment["replicas"]:
            click.echo(
                f"  replica {replica['index']} on {'+'.join(replica['nodes'])} "
                f"{replica['url']}: {replica['state']}"
            )


def _print_serve(serve: dict[str, object]) -> None:
    from halo_cluster import engine_registry
    from halo_cluster.engines.protocol import find_engine
    from halo_cluster.errors import UsageError

    state = "healthy" if serve["healthy"] else f"UNHEALTHY ({serve['detail']})"
    model = f" {serve['model']}" if serve.get("model") else ""
    executor = serve.get("executor")
    name = str(serve.get("engine") or engine_registry.DEFAULT)
    try:
        engine = find_engine(name)
        label, word = engine.label(str(executor) if executor else None), engine.member
    except UsageError:  # served by a halo that knows another engine
        label, word = name, "rank"
    # the state file, the server and the nodes said these: every line printed escaped
    click.echo(printable(f"serve{model} at {serve['endpoint']} ({label}): {state}"))
    ranks = serve.get("ranks") or []
    if isinstance(ranks, list) and ranks:
        shown = ", ".join(f"{word} {r['rank']} on {r['node']} ({r['address']})" for r in ranks)
        proven = serve.get("proven") or "no"
        click.echo(printable(f"  {word}s: {shown}; transport proven: {proven}"))
    _print_supervisor(serve.get("supervisor"))


def _print_supervisor(sup: object) -> None:
    if not isinstance(sup, dict):
        click.echo("  supervisor: none (served with --no-supervise, or by an older halo)")
        return
    uptime = sup.get("uptime_s")
    latency = sup.get("probe_latency_s")
    parts = [
        f"  supervisor: {sup.get('state')}",
        f"up {uptime:.0f} s" if isinstance(uptime, int | float) else None,
        f"{sup.get('restarts') or 0} restart(s)",
        f"last probe {latency * 1000:.0f} ms" if isinstance(latency, int | float) else None,
    ]
    click.echo(printable(", ".join(p for p in parts if p)))
    if sup.get("cause"):
        click.echo(printable(f"    cause: {sup['cause']}"))
    for change in sup.get("history") or []:
        if isinstance(change, dict) and isinstance(change.get("at"), int | float):
            at = time.strftime("%H:%M:%S", time.localtime(change["at"]))
            cause = f": {change['cause']}" if change.get("cause") else ""
            click.echo(printable(f"    {at} {change.get('state')}{cause}"))


@click.command()
@config_option()
@click.option("--json", "as_json", is_flag=True, help="Print {node: outcome} as JSON.")
def down(config_path: str | None, as_json: bool) -> int:
    """Stop Ray on every node; unreachable nodes are reported and the rest still stopped.
    Exit 1 if anything could not be stopped."""
    outcome = _lifecycle(config_path, as_json).down()
    if as_json:
        emit_json(outcome)
    else:
        for name, what in outcome.items():
            click.echo(printable(f"{name}: {what}"))
    return 0 if all(v == "stopped" for v in outcome.values()) else 1
