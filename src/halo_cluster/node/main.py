"""The node-side commands (argparse, standard library only): what ``halo`` runs on a node over
SSH. Each prints JSON (or a line) on stdout; errors are one line on stderr with halo's exit
codes. The same argv works through an installed ``halo`` (its hidden commands hand over here)
and through the zipapp halo sends (``python3 -c BOOT HASH COMMAND…``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from halo_cluster.jsonout import emit_json

# the commands that run on nodes; the controller's own CLI hands these to main()
COMMANDS = (
    "inventory",
    "counters",
    "serve-health",
    "serve-probe",
    "gguf-layers",
    "ray-nodes",
    "net-probe",
    "bench-driver",
    "setup",
    "exporter",
    "node-info",
)

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2 (usage), as halo's CLI
        sys.stderr.write(f"halo: error: {self.prog}: {message}\n")
        sys.exit(2)


def _inventory(args: argparse.Namespace) -> int:
    from halo_cluster.facts.inventory import collect_inventory

    emit_json(collect_inventory(args.root, versions=args.versions).to_dict())
    return 0


def _counters(args: argparse.Namespace) -> int:
    from halo_cluster.facts.counters import read_paths
    from halo_cluster.facts.root import Root

    port = rdma_arg(args.rdma) if args.rdma else None
    reader = Root(args.root)
    paths = read_paths(reader, args.fabric, args.mgmt, port)
    data = {"paths": {k: v.to_dict() for k, v in paths.items()}, "warnings": reader.warnings}
    json.dump(data, sys.stdout)
    return 0


def rdma_arg(text: str) -> tuple[str, int]:
    """``--rdma DEV:PORT`` -> (DEV, PORT): the port is after the last colon, 1 to 255 (a u8
    in the verbs API); anything else is a usage error, never a guessed port."""
    device, colon, number = text.rpartition(":")
    port = int(number) if number.isascii() and number.isdigit() and len(number) <= 3 else 0
    if not (colon and device and 1 <= port <= 255):
        raise _usage(f"counters --rdma {text!r}: use DEVICE:PORT (PORT from 1 to 255)")
    return device, port


def _serve_key() -> str | None:
    return os.environ.get("HALO_SERVE_KEY") or None  # never in argv


def _serve_health(args: argparse.Namespace) -> int:
    from halo_cluster.cluster.api import health

    try:
        data = health(args.host, args.port, _serve_key())
    except (OSError, ValueError) as err:
        sys.stderr.write(f"not healthy: {err}\n")
        return 1
    json.dump({"models": [m.get("id") for m in data["/v1/models"].get("data", [])]}, sys.stdout)
    return 0


def _serve_probe(args: argparse.Namespace) -> int:
    from halo_cluster.cluster.api import complete

    try:
        data = complete(args.host, args.port, _serve_key(), args.tokens)
    except (OSError, ValueError) as err:
        sys.stderr.write(f"request failed: {err}\n")
        return 1
    json.dump(data, sys.stdout)
    return 0


def _gguf_layers(args: argparse.Namespace) -> int:
    from pathlib import Path

    from halo_cluster.plan.gguf_header import block_count

    print(block_count(Path(args.path)))
    return 0


def _ray_nodes(args: argparse.Namespace) -> int:
    from halo_cluster.cluster.ray_nodes import wait_for_nodes
    from halo_cluster.errors import RayNodesError

    wanted = {a for a in (args.wait or "").split(",") if a}
    try:
        nodes = wait_for_nodes(wanted, args.timeout)
    except RayNodesError as err:
        sys.stderr.write(f"halo: error: {err}\n")
        return 1
    json.dump(nodes, sys.stdout)
    sys.stdout.write("\n")
    return 0


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: use ADDRESS:PORT")
    return host.strip("[]"), int(port)


def _net_probe(args: argparse.Namespace) -> int:
    from halo_cluster.bench import probe

    if args.mode == "serve":
        probe.serve(args.bind, args.port, args.limit)
        return 0
    host, port = args.target
    try:
        if args.mode == "ping":
            emit_json(probe.ping(host, port, args.seconds, args.size))
        else:
            emit_json(probe.stream(host, port, args.seconds, args.streams))
    except OSError as err:
        sys.stderr.write(f"halo: error: {host}:{port}: {err}\n")
        return 1
    return 0


def _bench_driver(args: argparse.Namespace) -> int:
    from halo_cluster.bench.collective import main_driver

    return main_driver(os.environ.get("HALO_BENCH_SPEC", ""), lambda line: print(line, flush=True))


def _setup(args: argparse.Namespace) -> int:
    from pathlib import Path

    from halo_cluster.setup.apply import setup_here
    from halo_cluster.setup.plan import SetupOptions

    opts = SetupOptions(
        args.distro, args.fabric_iface, args.address, args.mtu, str(Path.home()).lstrip("/")
    )
    only = set(args.step) or None
    if args.apply and not args.yes:
        raise _usage("setup --apply on a node needs --yes (the controller asks first)")
    done = setup_here(args.root, opts, only, args.apply)
    emit_json({"nodes": {_hostname(args.root): done}})
    return 0


def _hostname(root: str) -> str:
    from halo_cluster.facts.inventory import collect_inventory

    return collect_inventory(root).hostname or "local"


def _exporter(args: argparse.Namespace) -> int:
    from halo_cluster.monitor.probes import Target
    from halo_cluster.monitor.run import ExporterSpec, once, run_exporter, stderr
    from halo_cluster.units import parse_duration, parse_listen

    try:
        address, port = parse_listen(args.listen)
        targets = [_target(text, args.probe_port) for text in args.peer]
        spec = ExporterSpec(
            args.root,
            address,
            port,
            [*targets, *(Target(a, "extra", a, args.probe_port) for a in args.probe)],
            args.echo,
            args.probe_port,
            parse_duration(args.interval),
            parse_duration(args.rescan),
            parse_duration(args.rdma_probe_every) if args.rdma_probe_every else None,
        )
    except ValueError as err:
        raise _usage(str(err)) from None
    if args.once:
        sys.stdout.write(once(spec))
        return 0
    return run_exporter(spec, stderr)


def _target(text: str, port: int) -> Any:
    from halo_cluster.monitor.probes import Target

    parts = text.split(",")
    if len(parts) != 3 or parts[1] not in ("fabric", "mgmt") or not all(parts):
        raise ValueError(f"--peer {text!r}: use NAME,fabric|mgmt,ADDRESS")
    return Target(parts[0], parts[1], parts[2], port)


def _node_info(args: argparse.Namespace) -> int:
    import platform

    from halo_cluster import __version__

    emit_json({"halo": __version__, "python": platform.python_version()})
    return 0


def _usage(message: str) -> Exception:
    from halo_cluster.errors import UsageError

    return UsageError(message)


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="halo", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add(sub, "inventory", _inventory, root=True)
    sub.choices["inventory"].add_argument("--json", action="store_true", help="(always JSON)")
    sub.choices["inventory"].add_argument("--versions", action="store_true")
    counters = _add(sub, "counters", _counters, root=True)
    for flag in ("--fabric", "--mgmt", "--rdma"):
        counters.add_argument(flag)
    for name, handler in (("serve-health", _serve_health), ("serve-probe", _serve_probe)):
        command = _add(sub, name, handler)
        command.add_argument("--host", default="127.0.0.1")
        command.add_argument("--port", type=int, required=True)
    sub.choices["serve-probe"].add_argument("--tokens", type=_int_range(1, 4096), default=64)
    _add(sub, "gguf-layers", _gguf_layers).add_argument("path")
    ray = _add(sub, "ray-nodes", _ray_nodes)
    ray.add_argument("--wait", metavar="ADDR,...")
    ray.add_argument("--timeout", type=float, default=60.0)
    _net_probe_parser(sub)
    _add(sub, "bench-driver", _bench_driver)
    _setup_parser(sub)
    _exporter_parser(sub)
    _add(sub, "node-info", _node_info)
    return top


def _add(sub: Any, name: str, handler: Handler, root: bool = False) -> argparse.ArgumentParser:
    command: argparse.ArgumentParser = sub.add_parser(name)
    command.set_defaults(handler=handler)
    if root:
        command.add_argument("--root", default="/")
    return command


def _int_range(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in {low}..{high}")
        return value

    return parse


def _net_probe_parser(sub: Any) -> None:
    modes = _add(sub, "net-probe", _net_probe).add_subparsers(
        dest="mode", required=True, parser_class=_Parser
    )
    serve = modes.add_parser("serve")
    serve.add_argument("--bind", required=True)
    serve.add_argument("--port", required=True, type=_int_range(1, 65535))
    serve.add_argument("--limit", default=120.0, type=float)
    for mode, extra, default in (("ping", "--size", 64), ("stream", "--streams", 4)):
        client = modes.add_parser(mode)
        client.add_argument("target", type=_address)
        client.add_argument("--seconds", default=5.0, type=float)
        client.add_argument(extra, default=default, type=_int_range(1, 1 << 20))


def _setup_parser(sub: Any) -> None:
    setup = _add(sub, "setup", _setup, root=True)
    setup.add_argument("--local", action="store_true", help="(always this node)")
    setup.add_argument("--json", action="store_true", help="(always JSON)")
    setup.add_argument("--distro", default="auto", choices=["auto", "fedora", "ubuntu", "debian"])
    setup.add_argument("--fabric-iface")
    setup.add_argument("--address")
    setup.add_argument("--mtu", type=_int_range(1280, 65520), default=9000)
    setup.add_argument("--step", action="append", default=[])
    setup.add_argument("--apply", action="store_true")
    setup.add_argument("--yes", action="store_true")


def _exporter_parser(sub: Any) -> None:
    exporter = _add(sub, "exporter", _exporter, root=True)
    exporter.add_argument("--listen", default="127.0.0.1:9877")
    exporter.add_argument("--peer", action="append", default=[], metavar="NAME,PATH,ADDR")
    exporter.add_argument("--probe", action="append", default=[], metavar="ADDR")
    exporter.add_argument("--echo", action="append", default=[], metavar="ADDR")
    exporter.add_argument("--probe-port", type=_int_range(1, 65535), default=9878)
    exporter.add_argument("--interval", default="1s")
    exporter.add_argument("--rescan", default="10s")
    exporter.add_argument("--rdma-probe-every")
    exporter.add_argument("--once", action="store_true")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one node-side command; halo's one-line errors and exit codes, never a traceback
    for what a node or its input can be."""
    from halo_cluster.errors import HaloError, exit_code

    args = parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except HaloError as err:
        sys.stderr.write(f"halo: error: {err}\n")
        return exit_code(err)
    except KeyboardInterrupt as err:
        sys.stderr.write("halo: interrupted\n")
        return exit_code(err)
    except BrokenPipeError:
        return 1
    sys.stdout.flush()
    return code
