"""``halo gateway``: one authenticated OpenAI endpoint on the head for every deployment
(``start``, ``stop``, ``status``) and its API keys (``key add``, ``key list``,
``key revoke``).

Every command that asks the head reaches it first, once (``_reach_head``): a head that cannot
be reached is one line saying so, not a gateway "not running", "no gateway was running" or
"cannot run the gateway". What is done here stays done when the head cannot be told: a key
made is shown, a revocation is kept, the keys are listed with their use unknown (``--json``:
the counts null); the line says what the head did not get, and the exit code is 1."""

from __future__ import annotations

import time
from typing import Any

import click

from halo_cluster.cli.options import config_option, json_option
from halo_cluster.errors import HaloError
from halo_cluster.jsonout import JsonObject, emit_json
from halo_cluster.printable import printable

REACH_S = 30  # one round trip to the head (SSH gives up on the connection sooner)


def _cluster(config_path: str | None, quiet: bool):  # type: ignore[no-untyped-def]
    from halo_cluster.cli.cluster import cluster_handle

    return cluster_handle(config_path, quiet)


def _config(config_path: str | None):  # type: ignore[no-untyped-def]
    from halo_cluster.cli.options import require_config

    return require_config(config_path)


def _reach_head(cluster) -> None:  # type: ignore[no-untyped-def]
    """One round trip to the head; LifecycleError (one line) when it does not answer."""
    from halo_cluster.errors import LifecycleError

    found = cluster.client(cluster.head).script("exit 0\n", REACH_S)
    if not found.ok:
        raise LifecycleError(f"{cluster.head.name}: cannot reach the head: {found.error_text()}")


def _reached(config_path: str | None, quiet: bool):  # type: ignore[no-untyped-def]
    cluster = _cluster(config_path, quiet)
    _reach_head(cluster)
    return cluster


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

    found = control.start(_reached(config_path, as_json))
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

    stopped = control.stop(_reached(config_path, True))
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

    cluster = _cluster(config_path, True)
    try:  # a head that cannot be reached: not running, and 'problem' says why
        _reach_head(cluster)
        found = control.view(cluster).to_dict()
    except HaloError as err:
        url = control.url_of(cluster.config)
        found = control.GatewayView(url, False, False, False, problem=str(err)).to_dict()
    if as_json:
        emit_json(found)
    else:
        _render(found)
    return 0 if found["running"] else 1


def _render(found: dict[str, Any]) -> None:
    from halo_cluster.cli.output import plain

    said = "running" if found["running"] else "not running"
    if found.get("problem") and not (found["router"] or found["gate"]):
        said = "in an unknown state"  # the head did not answer
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
    # shown before the head is told: a key stored but never shown could not be used
    if as_json:
        emit_json({"name": name, "key": made})
    else:
        click.echo(made)
        click.echo(f"key {name}: shown once; send it as 'Authorization: Bearer …'", err=True)
    return _push(config_path, f"key {name} is stored here; a running gateway refuses it")


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
    try:  # the keys are listed all the same when the head cannot say their use
        cluster = _reached(config_path, True)
        usage, problem = control.usage(cluster), None
    except HaloError as err:
        usage, problem = None, str(err)
    rows = [_key_row(record, usage) for record in keys.keys]
    if as_json:
        emit_json(rows)
    else:
        _render_keys(rows, usage is not None)
    if problem is not None:
        click.echo(f"halo: warning: the keys' use is unknown ({printable(problem)})", err=True)
        return 1
    return 0


def _render_keys(rows: list[dict[str, Any]], known: bool) -> None:
    for row in rows:
        state = "revoked" if row["revoked"] else "active"
        used = (
            f"{row['requests']} request(s), "
            f"{row['prompt_tokens']} prompt + {row['completion_tokens']} completion tokens"
        )
        click.echo(f"{row['name']}: {state}, {used if known else 'use unknown'}")
    if not rows:
        click.echo("no keys: halo gateway key add NAME")


def _key_row(record, usage) -> JsonObject:  # type: ignore[no-untyped-def]
    """One key as 'key list' shows it: its counts None when the use is unknown."""
    used = None if usage is None else usage.keys.get(record.name)
    counts = ("requests", "refused", "prompt_tokens", "completion_tokens")
    return {
        "name": record.name,
        "created": record.created,
        "revoked": record.revoked,
        **{n: None if usage is None else getattr(used, n) if used else 0 for n in counts},
    }


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
    if as_json:
        emit_json({"name": record.name, "revoked": record.revoked})
    else:
        click.echo(f"key {name} revoked")
    return _push(config_path, f"key {name} is revoked here; a running gateway accepts it")


def _push(config_path: str | None, otherwise: str) -> int:
    """The keys' hashes to the head, where a running gate reads them: 0, or 1 with one line
    saying ``otherwise`` and why when the head cannot be told."""
    from halo_cluster.gateway import control

    try:
        cluster = _reached(config_path, True)
        if control.view(cluster).gate:
            control.sync(cluster)
    except HaloError as err:
        told = "until 'halo gateway start' tells it"
        click.echo(f"halo: warning: {otherwise} {told} ({printable(err)})", err=True)
        return 1
    return 0
