"""Each node command's body, short: take the parsed arguments (``wire/commands.py``), call
the code that does the work, print the answer (``wire/answers.py``). The work's own
modules are imported inside each handler, so a command loads only what it uses."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from halo_cluster.jsonout import JsonObject, emit_json
from halo_cluster.wire.commands import BENCH_SPEC_ENV, MODEL_SPEC_ENV, SERVE_KEY_ENV

if TYPE_CHECKING:
    from halo_cluster.facts.model import PowerReading
    from halo_cluster.monitor.run import ExporterSpec

Handler = Callable[[argparse.Namespace], int]


def inventory(args: argparse.Namespace) -> int:
    from halo_cluster.facts.inventory import collect_inventory

    emit_json(collect_inventory(args.root, versions=args.versions).to_dict())
    return 0


def counters(args: argparse.Namespace) -> int:
    from halo_cluster.facts.counters import read_paths
    from halo_cluster.facts.root import Root
    from halo_cluster.wire.answers import Counters

    reader = Root(args.root)
    # rdma: (device, port); link: a routed fabric's cables
    paths = read_paths(reader, args.fabric, args.mgmt, args.rdma, args.link or ())
    json.dump(Counters(paths, tuple(reader.warnings)).to_dict(), sys.stdout)
    return 0


AMD_SMI = ("amd-smi", "metric", "--power", "--json")
AMD_SMI_TIMEOUT_S = 5.0  # it answers in about a second; a hung one costs one sample


def power(args: argparse.Namespace) -> int:
    from halo_cluster.facts.energy import tier
    from halo_cluster.facts.power import read_power
    from halo_cluster.facts.root import Root
    from halo_cluster.wire.answers import Power

    reader = Root(args.root)
    readings = read_power(reader)
    warnings = list(reader.warnings)
    # amd-smi reads this machine (never a fixture root), and only where no source of an
    # earlier tier is there (facts.energy): it takes a second and the CPU being measured
    if args.root == "/" and not any(tier(r) is not None for r in readings):
        found, said = _amd_smi_power()
        readings, warnings = (*readings, *found), warnings + said
    json.dump(Power(tuple(readings), tuple(warnings)).to_dict(), sys.stdout)
    return 0


def _amd_smi_power() -> tuple[tuple[PowerReading, ...], list[str]]:
    """amd-smi's readings where it is installed (its absence is no warning); a run that
    fails, hangs or prints garbage is one warning and no reading."""
    import shutil

    from halo_cluster.errors import ParseError
    from halo_cluster.facts.power import parse_amd_smi_power
    from halo_cluster.runner.local import LocalRunner

    if shutil.which(AMD_SMI[0]) is None:
        return (), []
    done = LocalRunner().run(AMD_SMI, timeout=AMD_SMI_TIMEOUT_S)  # its output capped there
    if not done.ok:
        return (), [f"{' '.join(AMD_SMI)}: {done.error_text()[:200]}"]
    try:
        return parse_amd_smi_power(done.stdout), []
    except ParseError as err:
        return (), [f"{' '.join(AMD_SMI)}: {str(err)[:200]}"]


def _serve_key() -> str | None:
    return os.environ.get(SERVE_KEY_ENV) or None  # never in argv


class _Answer(Protocol):
    def to_dict(self) -> JsonObject: ...


def _server_answer(ask: Callable[[], _Answer], failed: str) -> int:
    """``ask()``'s answer from the node's server, as JSON; a connection or an answer that
    fails is one line, ``failed`` and why, on stderr (exit code 1)."""
    try:
        answer = ask()
    except (OSError, ValueError) as err:
        sys.stderr.write(f"{failed}: {err}\n")
        return 1
    json.dump(answer.to_dict(), sys.stdout)
    return 0


def serve_health(args: argparse.Namespace) -> int:
    from halo_cluster.node.serve_api import health

    return _server_answer(lambda: health(args.host, args.port, _serve_key()), "not healthy")


def serve_probe(args: argparse.Namespace) -> int:
    from halo_cluster.node.serve_api import complete

    return _server_answer(
        lambda: complete(args.host, args.port, _serve_key(), args.tokens), "request failed"
    )


def serve_tokens(args: argparse.Namespace) -> int:
    from halo_cluster.node.serve_api import greedy_answers

    if not args.prompt:
        sys.stderr.write("serve-tokens: no --prompt\n")
        return 2
    return _server_answer(
        lambda: greedy_answers(
            args.host, args.port, _serve_key(), args.prompt, args.tokens, args.top
        ),
        "request failed",
    )


def gguf_layers(args: argparse.Namespace) -> int:
    from pathlib import Path

    from halo_cluster.modelstore.gguf_header import block_count

    print(block_count(Path(args.path)))
    return 0


def ray_nodes(args: argparse.Namespace) -> int:
    from halo_cluster.errors import RayNodesError
    from halo_cluster.node.ray_nodes import wait_for_nodes

    try:
        nodes = wait_for_nodes(set(args.wait or ()), args.timeout)
    except RayNodesError as err:
        sys.stderr.write(f"halo: error: {err}\n")
        return 1
    json.dump([node.to_dict() for node in nodes], sys.stdout)
    sys.stdout.write("\n")
    return 0


def net_probe(args: argparse.Namespace) -> int:
    from halo_cluster.node import net_probe as probe

    if args.mode == "serve":
        probe.serve(args.bind, args.port, args.limit)
        return 0
    host, port = args.target
    try:
        if args.mode == "ping":
            emit_json(probe.ping(host, port, args.seconds, args.size).to_dict())
        else:
            emit_json(probe.stream(host, port, args.seconds, args.streams).to_dict())
    except OSError as err:
        sys.stderr.write(f"halo: error: {host}:{port}: {err}\n")
        return 1
    return 0


def bench_driver(args: argparse.Namespace) -> int:
    from halo_cluster.bench.driver import main_driver

    spec = os.environ.get(BENCH_SPEC_ENV, "")
    return main_driver(spec, lambda line: print(line, flush=True))


def setup(args: argparse.Namespace) -> int:
    from pathlib import Path

    from halo_cluster.setup.apply import setup_here
    from halo_cluster.setup.steps import SetupOptions

    if args.apply and not args.yes:
        raise _usage("setup --apply on a node needs --yes (the controller asks first)")
    home = str(Path.home()).lstrip("/")
    fabric = None
    if args.fabric is not None:
        from halo_cluster.errors import FabricError
        from halo_cluster.mesh import NodeFabric

        try:
            fabric = NodeFabric.from_dict(json.loads(args.fabric))
        except (ValueError, FabricError) as err:
            raise _usage(f"setup --fabric: {err}") from None
    names = tuple(tuple(given.partition("=")[::2]) for given in args.name or ())
    opts = SetupOptions(args.distro, args.fabric_iface, args.address, args.mtu, home, fabric, names)
    done = setup_here(args.root, opts, set(args.step) or None, args.apply)
    emit_json({"nodes": {_hostname(args.root): done}})  # the shape of answers.Setup
    return 0


def _hostname(root: str) -> str:
    from halo_cluster.facts.inventory import collect_inventory

    return collect_inventory(root).hostname or "local"


def exporter(args: argparse.Namespace) -> int:
    from halo_cluster.monitor.run import once, run_exporter, stderr

    try:
        spec = _exporter_spec(args)
    except ValueError as err:
        raise _usage(str(err)) from None
    if args.once:
        sys.stdout.write(once(spec))
        return 0
    return run_exporter(spec, stderr)


def _exporter_spec(args: argparse.Namespace) -> ExporterSpec:
    from halo_cluster.config.model import state_dir
    from halo_cluster.monitor.probes import Target
    from halo_cluster.monitor.run import ExporterSpec
    from halo_cluster.units import parse_duration, parse_listen

    address, port = parse_listen(args.listen)
    port_of = args.probe_port
    peers = [Target(name, path, peer, port_of) for name, path, peer in args.peer]
    extra = [Target(peer, "extra", peer, port_of) for peer in args.probe]
    every = args.rdma_probe_every

    def duration(text: str, option: str) -> float:
        try:
            return parse_duration(text)
        except ValueError as err:
            raise ValueError(f"{option} {err}") from None

    return ExporterSpec(
        args.root,
        address,
        port,
        [*peers, *extra],
        args.echo,
        port_of,
        duration(args.interval, "--interval"),
        duration(args.rescan, "--rescan"),
        duration(every, "--rdma-probe-every") if every else None,
        state_dir=str(state_dir()),
    )


def node_info(args: argparse.Namespace) -> int:
    import platform

    from halo_cluster import __version__
    from halo_cluster.wire.answers import NodeInfo

    emit_json(NodeInfo(__version__, platform.python_version()).to_dict())
    return 0


def model_store(args: argparse.Namespace) -> int:
    """model-list, model-state, model-verify, model-rm."""
    from halo_cluster.node.models import run

    run(args.command, args.store, getattr(args, "name", ""))
    return 0


def model_hash(args: argparse.Namespace) -> int:
    from halo_cluster.node.models import hash_source

    emit_json(hash_source(args.store, args.path, args.name or "", args.prefix).to_dict())
    return 0


def model_pipe(args: argparse.Namespace) -> int:
    from halo_cluster.node.models import pipe

    return pipe(os.environ.get(MODEL_SPEC_ENV, ""))


def model_stop(args: argparse.Namespace) -> int:
    from halo_cluster.node.models import stop

    emit_json({"stopped": stop(args.run)})
    return 0


def rpc_cache(args: argparse.Namespace) -> int:
    from halo_cluster.modelstore.rpc_cache import look, trim

    used = look(args.store) if args.quota_bytes is None else trim(args.store, args.quota_bytes)
    emit_json(used.to_dict())
    return 0


def _usage(message: str) -> Exception:
    from halo_cluster.errors import UsageError

    return UsageError(message)


def supervise(args: argparse.Namespace) -> int:
    from halo_cluster.node.supervisor import main as supervise_main

    return supervise_main(args.spec, lambda line: print(line, flush=True))


HANDLERS: dict[str, Handler] = {
    "inventory": inventory,
    "counters": counters,
    "power": power,
    "serve-health": serve_health,
    "serve-probe": serve_probe,
    "serve-tokens": serve_tokens,
    "gguf-layers": gguf_layers,
    "ray-nodes": ray_nodes,
    "net-probe": net_probe,
    "bench-driver": bench_driver,
    "setup": setup,
    "exporter": exporter,
    "node-info": node_info,
    "model-list": model_store,
    "model-state": model_store,
    "model-verify": model_store,
    "model-rm": model_store,
    "model-hash": model_hash,
    "model-pipe": model_pipe,
    "model-stop": model_stop,
    "rpc-cache": rpc_cache,
    "supervise": supervise,
}
