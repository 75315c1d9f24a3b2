"""``halo serve``, ``halo stop``, ``halo logs`` (and the node-side ``halo serve-health``)."""

from __future__ import annotations

import json
import os
import sys
import time

import click

from halo_cluster.cli.output import emit_json

CONFIG_HELP = "Cluster config (default ./halo.toml, then $XDG_CONFIG_HOME/halo/halo.toml)."


def _server(config_path: str | None, quiet: bool):  # type: ignore[no-untyped-def]
    from halo_cluster.cli.cluster import _lifecycle
    from halo_cluster.cluster.serve import Server

    lifecycle = _lifecycle(config_path, quiet)
    return Server(lifecycle, lifecycle.progress)


@click.command()
@click.argument("model", required=False)
@click.option("--config", "config_path", metavar="FILE", help=CONFIG_HELP)
@click.option(
    "--tp", type=click.IntRange(1, 1024), help="Tensor-parallel size (default: one rank per node)."
)
@click.option("--host", help="Address the API binds to (default [serve] host, 127.0.0.1).")
@click.option(
    "--port", type=click.IntRange(1, 65535), help="API port (default [serve] port, 8000)."
)
@click.option(
    "--allow-fallback", is_flag=True, help="Keep serving when NCCL fell back from RDMA to sockets."
)
@click.option("--insecure", is_flag=True, help="Allow 0.0.0.0 without an API key.")
@click.option(
    "--wait", "wait_s", default=900.0, show_default=True, help="Seconds to wait for /health."
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print {url, log, expected, verdict, stopped} as JSON."
)
def serve(
    model: str | None,
    config_path: str | None,
    tp: int | None,
    host: str | None,
    port: int | None,
    allow_fallback: bool,
    insecure: bool,
    wait_s: float,
    as_json: bool,
) -> int:
    """Start vLLM tensor-parallel across the cluster (Ray executor) on the head with the head's
    plan and NCCL_DEBUG=INFO, wait for /health and /v1/models, then prove the transport from
    NCCL's log: when the plan wanted RDMA and the log shows sockets or a mix, the server is
    stopped and halo exits 1 with the evidence (unless --allow-fallback)."""
    server = _server(config_path, as_json)
    result = server.start(model, tp, host, port, allow_fallback, insecure, wait_s)
    if as_json:
        emit_json(result.__dict__)
    else:
        verdict = result.verdict
        click.echo(
            f"transport proven: {verdict['transport']} (expected {result.expected}); "
            f"networks {verdict['networks']}"
        )
        for line in verdict["evidence"][:6]:
            click.echo(f"  {line}")
        if result.stopped:
            click.echo(
                "halo: error: the log shows another transport than the plan asked for: "
                "server stopped (--allow-fallback keeps it)",
                err=True,
            )
        else:
            click.echo(f"serving at {result.url} (log {result.log} on {server.head.name})")
    return 1 if result.stopped else 0


@click.command()
@click.option("--config", "config_path", metavar="FILE", help=CONFIG_HELP)
def stop(config_path: str | None) -> int:
    """Stop the vLLM server started by 'halo serve'."""
    stopped = _server(config_path, True).stop()
    click.echo("server stopped" if stopped else "no server was running")
    return 0


@click.command()
@click.option("--config", "config_path", metavar="FILE", help=CONFIG_HELP)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines (Ctrl-C to stop).")
@click.option("-n", "--lines", default=200, show_default=True, help="Lines to show first.")
def logs(config_path: str | None, follow: bool, lines: int) -> int:
    """Show the server's log on the head."""
    server = _server(config_path, True)
    text = server.tail(lines)
    sys.stdout.write(text)
    if not follow:
        return 0
    offset = len(server.log_from(0).encode())
    try:
        while True:
            time.sleep(1.0)
            new = server.log_from(offset)
            if new:
                sys.stdout.write(new)
                sys.stdout.flush()
                offset += len(new.encode())
    except KeyboardInterrupt:
        return 0


@click.command("serve-health", hidden=True)
@click.option("--host", default="127.0.0.1")
@click.option("--port", type=int, required=True)
def serve_health(host: str, port: int) -> int:
    """Node side: exit 0 when /health and /v1/models answer (key from $HALO_SERVE_KEY)."""
    from halo_cluster.cluster.serve import health

    try:
        data = health(host, port, os.environ.get("HALO_SERVE_KEY") or None)
    except (OSError, ValueError) as err:
        click.echo(f"not healthy: {err}", err=True)
        return 1
    json.dump({"models": [m.get("id") for m in data["/v1/models"].get("data", [])]}, sys.stdout)
    return 0
