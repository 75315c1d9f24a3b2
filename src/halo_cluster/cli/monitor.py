"""``halo exporter``, ``halo top`` and ``halo monitoring``: live fabric monitoring."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from halo_cluster.cli.options import choice_option, config_option, range_option, root_option
from halo_cluster.errors import UsageError
from halo_cluster.jsonout import JsonObject, emit_json
from halo_cluster.monitor.scrape import scrape_all

if TYPE_CHECKING:
    from halo_cluster.config import Config, NodeConfig
    from halo_cluster.monitor.probes import Target

DEFAULT_PORT = 9877
PROBE_PORT = 9878


def parse_duration(text: str, option: str = "--interval") -> float:
    """``500ms``, ``1s``, ``5m``, ``1h`` or plain seconds, at most a day (a one-line usage
    error naming the option otherwise: a waiting thread must never meet a huge value)."""
    from halo_cluster.errors import UsageError
    from halo_cluster.units import parse_duration as seconds

    try:
        return seconds(text)
    except ValueError as err:
        raise UsageError(f"{option} {err}") from None


def _listen(text: str) -> tuple[str, int]:
    from halo_cluster.errors import UsageError
    from halo_cluster.units import parse_listen

    try:
        return parse_listen(text)
    except ValueError as err:
        raise UsageError(f"--listen {err}") from None


def _this_node(config: Config, name: str | None) -> NodeConfig | None:
    """--node, else the node whose fabric or management address this host has."""
    if name:
        return config.node(name)
    from halo_cluster.facts.inventory import collect_inventory

    own = {c.split("/")[0] for iface in collect_inventory("/").net for c in iface.ipv4}
    return next((n for n in config.nodes if n.fabric_address in own or n.mgmt_address in own), None)


def probe_targets(config: Config, me: NodeConfig | None, port: int) -> list[Target]:
    from halo_cluster.monitor.probes import Target

    targets = []
    for node in config.nodes:
        if me is not None and node.name == me.name:
            continue
        for path, address in (("fabric", node.fabric_address), ("mgmt", node.mgmt_address)):
            if address:
                targets.append(Target(node.name, path, address, port))
    return targets


@click.command()
@root_option("Read counters below DIR.")
@click.option(
    "--listen",
    default=f"127.0.0.1:{DEFAULT_PORT}",
    show_default=True,
    metavar="ADDR:PORT",
    help="Where /metrics is served; any address but 127.0.0.1 must be given explicitly.",
)
@config_option("Cluster config: probe every other node.")
@click.option(
    "--node",
    "node_name",
    metavar="NAME",
    help="Which node of the config this is (default: by address).",
)
@click.option(
    "--interval", default="1s", show_default=True, help="Sample and probe interval (500ms, 1s, 5s)."
)
@click.option(
    "--probe",
    "probes",
    multiple=True,
    metavar="ADDR",
    help="Also probe this address (path 'extra').",
)
@click.option(
    "--probe-port", default=PROBE_PORT, show_default=True, type=int, help="TCP echo port."
)
@click.option(
    "--rdma-probe-every",
    metavar="DURATION",
    help="Also measure RDMA latency to every peer with perftest ib_write_lat (e.g. 5m).",
)
@click.option(
    "--baseline",
    "baseline_path",
    metavar="FILE",
    help="bench net result for latency alerts (default: the latest in the results directory).",
)
@click.option(
    "--rescan",
    default="10s",
    show_default=True,
    help="Look for devices and interfaces that appeared, vanished or came back this often.",
)
@click.option("--once", is_flag=True, help="Print one /metrics page and exit (no server).")
def exporter(
    root: str,
    listen: str,
    config_path: str | None,
    node_name: str | None,
    interval: str,
    probes: tuple[str, ...],
    probe_port: int,
    rdma_probe_every: str | None,
    baseline_path: str | None,
    rescan: str,
    once: bool,
) -> int:
    """Prometheus exporter of the fabric: RDMA port and driver counters, normalised RDMA
    bytes, interface statistics, PCIe width, GPU memory, TCP echo round trips to every peer
    on each path, and alerts (link down, errors rising, latency over twice its baseline)."""
    from halo_cluster.config import find_config, load_config
    from halo_cluster.config.model import state_dir
    from halo_cluster.monitor.probes import Target
    from halo_cluster.monitor.run import ExporterSpec, run_exporter
    from halo_cluster.monitor.run import once as one_page

    address, port = _listen(listen)
    path = find_config(config_path) if config_path else None
    targets: list[Target] = [Target(a, "extra", a, probe_port) for a in probes]
    echo_addresses: list[str] = []
    if path is not None:
        config = load_config(path)
        me = _this_node(config, node_name)
        targets += probe_targets(config, me, probe_port)
        if me is not None:
            echo_addresses = [a for a in (me.fabric_address, me.mgmt_address) if a]
    spec = ExporterSpec(
        root,
        address,
        port,
        targets,
        echo_addresses or ([address] if probes else []),
        probe_port,
        parse_duration(interval),
        parse_duration(rescan, "--rescan"),
        parse_duration(rdma_probe_every, "--rdma-probe-every") if rdma_probe_every else None,
        _baseline(baseline_path),
        str(state_dir()),
    )
    if once:
        sys.stdout.write(one_page(spec))
        return 0
    return run_exporter(spec, lambda m: click.echo(m, err=True))


def _baseline(explicit: str | None) -> dict[tuple[str, str], float]:
    """--baseline FILE (an error when unusable), else the latest bench net result in the
    results directory: when that cannot be read or used, a warning, and latency alerts
    measure against the first steady p50 instead."""
    from pathlib import Path

    from halo_cluster.config import results_dir
    from halo_cluster.errors import UsageError
    from halo_cluster.monitor.baseline import latest_result, load_baseline

    if explicit:
        return load_baseline(Path(explicit))
    directory = results_dir()
    instead = "latency alerts use the first steady p50"
    try:
        path = latest_result(directory)
        return load_baseline(path) if path else {}
    except OSError as err:
        warning = f"cannot read the results directory {directory}: {err.strerror or err}"
    except UsageError as err:
        warning = str(err)
    click.echo(f"halo: warning: {warning}; {instead}", err=True)
    return {}


def top_targets(
    config_path: str | None, targets: str | None, port: int, deployment: str | None = None
) -> list[str]:
    """The exporters to watch: ``targets`` as given, else every node's in the config, or
    with ``deployment`` only those of the nodes its replicas run on."""
    from halo_cluster.cli.options import require_config

    if targets:
        if deployment:
            raise UsageError("--name picks nodes from the cluster config: give it, or --targets")
        return [t.strip() for t in targets.split(",") if t.strip()]
    config = require_config(
        config_path, "give --targets HOST:PORT,… or a cluster config (--config halo.toml)"
    )
    nodes = list(config.nodes)
    if deployment:
        from halo_cluster.cluster.state import named_deployment, read_state

        used = {
            n for r in named_deployment(read_state(config), deployment).replicas for n in r.nodes
        }
        nodes = [n for n in nodes if n.name in used]
    return [f"{n.mgmt_address or n.host}:{port}" for n in nodes]


@click.command()
@config_option("Cluster config: every node's exporter.")
@click.option("--targets", metavar="HOST:PORT,…", help="Exporters to watch.")
@click.option(
    "--port", default=DEFAULT_PORT, show_default=True, help="Exporter port with --config."
)
@click.option("--interval", default="1s", show_default=True)
@click.option(
    "--once",
    is_flag=True,
    help="Print one plain-text frame (two scrapes one interval apart) and exit.",
)
@click.option("--json", "as_json", is_flag=True, help="With --once: the frame as JSON.")
@click.option(
    "--name", "deployment", help="Only the nodes of this deployment's replicas ('halo run --name')."
)
def top(
    config_path: str | None,
    targets: str | None,
    port: int,
    interval: str,
    once: bool,
    as_json: bool,
    deployment: str | None,
) -> int:
    """A live dashboard of every node's exporter: Gb/s per port and interface, packet and
    error rates, probe latency p50/p99 per peer and path, link state and alerts."""
    from halo_cluster.monitor.frame import build_frame, render_frame

    interval_s = parse_duration(interval)
    names = top_targets(config_path, targets, port, deployment)
    if once:
        first = scrape_all(names)
        time.sleep(interval_s)
        second = scrape_all(names)
        frame = build_frame(first, second, interval_s)
        if as_json:
            emit_json(frame.to_dict())
        else:
            sys.stdout.write(render_frame(frame))
        return 0
    try:
        from halo_cluster.monitor.tui import run_tui
    except ImportError:
        from halo_cluster.errors import UsageError

        raise UsageError(
            "the live dashboard needs textual: pip install 'halo-cluster[tui]' (or use --once)"
        ) from None
    run_tui(names, interval_s)
    return 0


@click.group()
def monitoring() -> None:
    """Monitoring ecosystem helpers (Prometheus, Grafana, systemd)."""


@monitoring.command("prometheus-config")
@config_option("Cluster config.")
@click.option(
    "--port", default=DEFAULT_PORT, show_default=True, help="Exporter port on every node."
)
@click.option("--interval", default="5s", show_default=True, help="Scrape interval.")
@click.option(
    "--rules",
    "rules_path",
    metavar="FILE",
    help="Also write the serving alert rules (server down, crash loop, probe slow) to FILE "
    "and name it under rule_files.",
)
@click.option(
    "--probe-slow",
    default="5s",
    show_default=True,
    help="HaloProbeSlow fires when the supervisor's one-token probe takes longer.",
)
def prometheus_config(
    config_path: str | None, port: int, interval: str, rules_path: str | None, probe_slow: str
) -> int:
    """Print a Prometheus scrape config for every node's exporter (with --rules, and the
    alert rules on the supervised server's metrics)."""
    import json

    from halo_cluster.cli.options import require_config

    config = require_config(config_path, "no cluster config: --config halo.toml")
    seconds = parse_duration(interval)  # a bad interval is a usage error, never YAML
    slow = parse_duration(probe_slow, "--probe-slow")
    # every value is a JSON string, which YAML reads as a double-quoted scalar: nothing in
    # a node's name, address or the config's path can add keys or lines
    source = ascii(str(config.path))[1:-1]
    lines = [
        f"# halo exporters of cluster {config.name} (generated from {source})",
        "scrape_configs:",
        "  - job_name: halo",
        f"    scrape_interval: {json.dumps(f'{seconds:g}s')}",
        "    static_configs:",
    ]
    for node in config.nodes:
        target = json.dumps(f"{node.mgmt_address or node.host}:{port}")
        labels = {"node": node.name, "cluster": config.name}
        lines += [f"      - targets: [{target}]", f"        labels: {json.dumps(labels)}"]
    lines += _gateway_job(config, seconds)
    if rules_path:
        from halo_cluster.atomic import write_output
        from halo_cluster.monitor.alerts import serving_rules

        write_output(rules_path, serving_rules(slow))
        lines[1:1] = ["rule_files:", f"  - {json.dumps(str(Path(rules_path).resolve()))}"]
    click.echo("\n".join(lines))
    return 0


def _gateway_job(config: Config, seconds: float) -> list[str]:
    """vllm-router's own metrics on the head ('halo gateway'), where Prometheus can reach
    them: [gateway] metrics_host other than the head's loopback."""
    import json

    from halo_cluster.serving.bringup import loopback_host

    gateway = config.gateway
    if loopback_host(gateway.metrics_host):
        return [
            "# the gateway's router metrics listen on the head's loopback: set [gateway] "
            "metrics_host to scrape them"
        ]
    host = config.head.mgmt_address or config.head.host
    host = host if gateway.metrics_host == "0.0.0.0" else gateway.metrics_host
    target = json.dumps(f"{host}:{gateway.metrics_port}")
    labels = json.dumps({"cluster": config.name, "node": config.head.name})
    return [
        "  - job_name: halo-gateway",
        f"    scrape_interval: {json.dumps(f'{seconds:g}s')}",
        "    static_configs:",
        f"      - targets: [{target}]",
        f"        labels: {labels}",
    ]


@monitoring.command("exporter-unit")
@config_option("Cluster config.")
@click.option("--node", "names", multiple=True, metavar="NAME", help="Only these nodes.")
@choice_option(
    "--listen",
    "listen_on",
    choices=["loopback", "mgmt", "fabric"],
    default="loopback",
    help="The address each exporter binds: 127.0.0.1, or the node's management (what "
    "'prometheus-config' scrapes) or fabric address.",
)
@range_option("--port", default=DEFAULT_PORT, low=1, high=65535)
@click.option("--interval", default="1s", show_default=True, help="Sample and probe interval.")
@click.option(
    "--install",
    "do_install",
    is_flag=True,
    help="Copy halo's node code and the unit to every node over SSH (as root) and start it "
    "where systemd runs.",
)
@click.option("--json", "as_json", is_flag=True, help="Print {nodes: {name: {unit, argv, …}}}.")
def exporter_unit(
    config_path: str | None,
    names: tuple[str, ...],
    listen_on: str,
    port: int,
    interval: str,
    do_install: bool,
    as_json: bool,
) -> int:
    """The exporter as a systemd unit on every node, which needs only Python 3 there: the unit
    runs halo's node code (copied to /var/lib/halo, checked against its hash) with the node's
    peers and addresses. Without --install it prints the units."""
    from halo_cluster.cli.options import require_config
    from halo_cluster.config import halo_node_code
    from halo_cluster.monitor.deploy import exporter_units

    config = require_config(config_path, "no cluster config: --config halo.toml")
    parse_duration(interval)
    nodes = [config.node(n) for n in names] if names else list(config.nodes)
    code = halo_node_code()
    units = exporter_units(config, nodes, code, listen_on, port, interval)
    data: dict[str, JsonObject] = {u.node: u.to_dict() for u in units}
    failed = False
    if do_install:
        from halo_cluster.client.node import ssh_clients
        from halo_cluster.monitor.deploy import install_units

        for name, outcome in install_units(ssh_clients(config), units, code).items():
            data[name].update(outcome)
            failed = failed or not outcome["installed"]
            if not as_json:
                click.echo(f"{name}: {_install_line(outcome)}")
    if as_json:
        emit_json({"nodes": data})
    elif not do_install:
        for unit in units:
            click.echo(f"# {unit.node}: {UNIT_HELP}\n{unit.unit}")
    return 1 if failed else 0


UNIT_HELP = "/etc/systemd/system/halo-exporter.service, with halo's node code in /var/lib/halo"


def _install_line(outcome: dict[str, Any]) -> str:
    if not outcome["installed"]:
        return f"not installed: {outcome['error']}"
    if outcome["started"]:
        return "installed and started (systemctl status halo-exporter)"
    return "installed; no systemd runs there: start the unit's ExecStart yourself"
