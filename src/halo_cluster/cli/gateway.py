"""``halo gateway``: one authenticated OpenAI endpoint on the head for every deployment
(``start``, ``stop``, ``status``) and its API keys (``key add``, ``key list``,
``key revoke``)."""

from __future__ import annotations

import time
from typing import Any

import click

from halo_cluster.cli.options import config_option, json_option
from halo_cluster.jsonout import emit_json


def _cluster(config_path: str | None, quiet: bool):  # type: ignore[no-untyped-def]
    from halo_cluster.cli.cluster import cluster_handle

    return cluster_handle(config_path, quiet)


def _config(config_path: str | None):  # type: ignore[no-untyped-def]
    from halo_cluster.cli.options import require_config

    return require_config(config_path)


@click.group()
def gateway() -> None:
    """One OpenAI endpoint on the head ([gateway] host, port) in front of every deployment
    ('halo run MODEL --name NAME'): requests routed by their model to a healthy replica by
    vllm-router, every request checked against halo's API keys first."""


@gateway.command("start")
@config_option()
@json_option("Print {url, running, router, gate, workers: [{url, model_id, healthy}]} as JSON.")
def start(config_path: str | None, as_json: bool) -> int:
    """Start the router and the key gate on the head (a running gateway is kept), then
    register every deployment's replicas."""
    from halo_cluster.gateway import control

    found = control.start(_cluster(config_path, as_json))
    if as_json:
        emit_json(found.to_dict())
    else:
        _render(found.to_dict())
    return 0 if found.running else 1


@gateway.command("stop")
@config_option()
@json_option("Print {stopped} as JSON.")
def stop(config_path: str | None, as_json: bool) -> int:
    """Stop the key gate and the router on the head (the deployments keep serving)."""
    from halo_cluster.gateway import control

    stopped = control.stop(_cluster(config_path, True))
    if as_json:
        emit_json({"stopped": stopped})
    else:
        click.echo("gateway stopped" if stopped else "no gateway was running")
    return 0


@gateway.command("status")
@config_option()
@json_option("Print {url, running, router, gate, workers, problem} as JSON.")
def status(config_path: str | None, as_json: bool) -> int:
    """Whether the gateway runs, and every replica the router holds with its health.
    Exit 1 when it does not run."""
    from halo_cluster.gateway import control

    found = control.view(_cluster(config_path, True)).to_dict()
    if as_json:
        emit_json(found)
    else:
        _render(found)
    return 0 if found["running"] else 1


def _render(found: dict[str, Any]) -> None:
    from halo_cluster.cli.output import plain

    said = "running" if found["running"] else "not running"
    click.echo(f"gateway {said} at {found['url']}")
    for worker in found["workers"]:
        health = "healthy" if worker["healthy"] else "UNHEALTHY"
        click.echo(f"  {plain(str(worker['model_id']))}: {plain(str(worker['url']))} {health}")
    if found.get("problem"):
        click.echo(f"  problem: {plain(found['problem'])}", err=True)


@gateway.group("key")
def key() -> None:
    """The gateway's API keys: stored hashed (0600, in the cluster's state directory), each
    shown once when made."""


@key.command("add")
@click.argument("name")
@config_option()
@json_option('Print {"name", "key"} as JSON (the only time the key is shown).')
def key_add(name: str, config_path: str | None, as_json: bool) -> int:
    """Make a key named NAME and print it once; the gateway takes it within seconds."""
    from halo_cluster.gateway import control
    from halo_cluster.gateway.keys import add_key

    config = _config(config_path)
    made = add_key(control.keys_path(config), name, time.time())
    _push(config_path)
    if as_json:
        emit_json({"name": name, "key": made})
    else:
        click.echo(made)
        click.echo(f"key {name}: shown once; send it as 'Authorization: Bearer …'", err=True)
    return 0


@key.command("list")
@config_option()
@json_option(
    "Print [{name, created, revoked, requests, refused, prompt_tokens, completion_tokens}] "
    "as JSON (never a key)."
)
def key_list(config_path: str | None, as_json: bool) -> int:
    """Every key's name, when it was made or revoked, and its use through the gateway."""
    from halo_cluster.gateway import control
    from halo_cluster.gateway.keys import read_keys

    config = _config(config_path)
    keys = read_keys(control.keys_path(config))
    usage = control.usage(_cluster(config_path, True))
    rows = []
    for record in keys.keys:
        used = usage.keys.get(record.name)
        rows.append(
            {
                "name": record.name,
                "created": record.created,
                "revoked": record.revoked,
                "requests": used.requests if used else 0,
                "refused": used.refused if used else 0,
                "prompt_tokens": used.prompt_tokens if used else 0,
                "completion_tokens": used.completion_tokens if used else 0,
            }
        )
    if as_json:
        emit_json(rows)
        return 0
    for row in rows:
        state = "revoked" if row["revoked"] else "active"
        click.echo(
            f"{row['name']}: {state}, {row['requests']} request(s), "
            f"{row['prompt_tokens']} prompt + {row['completion_tokens']} completion tokens"
        )
    if not rows:
        click.echo("no keys: halo gateway key add NAME")
    return 0


@key.command("revoke")
@click.argument("name")
@config_option()
@json_option("Print {name, revoked} as JSON.")
def key_revoke(name: str, config_path: str | None, as_json: bool) -> int:
    """Revoke NAME's key: the gateway refuses it within seconds."""
    from halo_cluster.gateway import control
    from halo_cluster.gateway.keys import revoke_key

    config = _config(config_path)
    record = revoke_key(control.keys_path(config), name, time.time())
    _push(config_path)
    if as_json:
        emit_json({"name": record.name, "revoked": record.revoked})
    else:
        click.echo(f"key {name} revoked")
    return 0


def _push(config_path: str | None) -> None:
    """The keys' hashes to the head, where a running gate reads them."""
    from halo_cluster.gateway import control

    cluster = _cluster(config_path, True)
    if control.view(cluster).gate:
        control.sync(cluster)
