"""The node side of the benchmarks (hidden commands that ``halo bench`` starts on the nodes
over SSH): ``halo net-probe serve|ping|stream`` (the built-in TCP probe) and
``halo bench-driver`` (the collective/TP driver on the head)."""

from __future__ import annotations

from collections.abc import Callable

import click

from halo_cluster.cli.output import emit_json


@click.group("net-probe", hidden=True)
def net_probe() -> None:
    """halo's built-in TCP probe (used by 'halo bench net' when the peer tools are missing)."""


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter(f"{text!r}: use ADDRESS:PORT")
    return host.strip("[]"), int(port)


def _probe(target: str, measure: Callable[[str, int], dict[str, object]]) -> int:
    """Measure against TARGET (ADDRESS:PORT) and print the JSON; a socket error is one line."""
    host, port = _address(target)
    try:
        emit_json(measure(host, port))
    except OSError as err:
        raise click.ClickException(f"{host}:{port}: {err}") from None
    return 0


@net_probe.command("serve")
@click.option("--bind", required=True)
@click.option("--port", required=True, type=click.IntRange(1, 65535))
@click.option("--limit", default=120.0, type=click.FloatRange(1, 86400), help="Seconds to serve.")
def net_probe_serve(bind: str, port: int, limit: float) -> int:
    from halo_cluster.bench.probe import serve

    serve(bind, port, limit)
    return 0


@net_probe.command("ping")
@click.argument("target")
@click.option("--seconds", default=5.0, type=click.FloatRange(0.1, 600))
@click.option("--size", default=64, type=click.IntRange(1, 1 << 20))
def net_probe_ping(target: str, seconds: float, size: int) -> int:
    """Ping-pong against TARGET (ADDRESS:PORT); JSON latency, one way."""
    from halo_cluster.bench.probe import ping

    return _probe(target, lambda host, port: ping(host, port, seconds, size))


@net_probe.command("stream")
@click.argument("target")
@click.option("--seconds", default=5.0, type=click.FloatRange(0.1, 600))
@click.option("--streams", default=4, type=click.IntRange(1, 128))
def net_probe_stream(target: str, seconds: float, streams: int) -> int:
    """Parallel TCP streams to TARGET (ADDRESS:PORT); JSON Gb/s."""
    from halo_cluster.bench.probe import stream

    return _probe(target, lambda host, port: stream(host, port, seconds, streams))


@click.command("bench-driver", hidden=True)
def bench_driver() -> int:
    """Node side of 'halo bench collective' / 'bench tp' (spec in $HALO_BENCH_SPEC)."""
    import os

    from halo_cluster.bench.collective import main_driver

    return main_driver(os.environ.get("HALO_BENCH_SPEC", ""), lambda line: click.echo(line))
