"""``halo lab``: a real multi-node cluster on this machine (network namespaces + sshd)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from halo_cluster.cli.options import choice_option, range_option
from halo_cluster.cli.output import styled, table
from halo_cluster.jsonout import emit_json
from halo_cluster.lab.state import MAX_NODES

F = TypeVar("F", bound=Callable[..., Any])

NAME_HELP = "Lab name (default: the only lab in ./.halo-lab, or of this host, else 'lab')."
DIR_HELP = "Lab directory (default ./.halo-lab/NAME, else where lab NAME was made)."


def lab_options(command: F) -> F:
    """--name and --dir, shared by every lab command."""
    command = click.option("--dir", "directory", help=DIR_HELP)(command)
    return click.option("--name", help=NAME_HELP)(command)


@click.group()
def lab() -> None:
    """A local lab: N nodes with their own network, process tree, hostname and /tmp, linked by
    a management network (eno1, SSH) and a fabric (enp194s0np0). Needs root."""


def _resolve(name: str | None, directory: str | None) -> tuple[str, Path]:
    """The lab's name and directory: --dir, else ./.halo-lab/NAME, else where the registry
    says lab NAME lives (so a lab is found by name from anywhere)."""
    from halo_cluster.lab.lab import find_labs, lab_dir
    from halo_cluster.lab.state import check_name, read_state, registered

    if name is None:
        labs = find_labs()
        name = labs[0] if len(labs) == 1 else "lab"
    check_name(name)
    path = lab_dir(name, directory)
    if directory is None and read_state(path) is None:
        elsewhere = registered(name)
        if elsewhere is not None:
            path = Path(elsewhere.dir)
    return name, path


def _state(name: str | None, directory: str | None):  # type: ignore[no-untyped-def]
    from halo_cluster.errors import UsageError
    from halo_cluster.lab.state import read_state, registered

    lab_name, path = _resolve(name, directory)
    # a lab whose directory was removed still runs: the registry knows it
    state = read_state(path) or (registered(lab_name) if directory is None else None)
    if state is None:
        raise UsageError(
            f"no lab named {lab_name} in {path}: start one with 'halo lab up --name {lab_name}'"
        )
    return state


@lab.command("up")
@range_option("--nodes", default=2, low=2, high=MAX_NODES, help=f"Number of nodes (2-{MAX_NODES}).")
@lab_options
@range_option("--fabric-mtu", default=9000, low=1280, high=65520)
@click.option(
    "--engine",
    metavar="DIR",
    help="Engine environment (vLLM CPU + Ray) every node sees read-only, and halo.toml uses "
    "(default: $HALO_ENGINE, else .venv-engine beside halo's environment, when it exists).",
)
@click.option("--no-engine", is_flag=True, help="Write a halo.toml without the engine environment.")
@click.option(
    "--llama-cpp",
    metavar="DIR",
    help="llama.cpp build (bin/ggml-rpc-server, bin/llama-server) every node sees read-only "
    "(default: $HALO_LLAMA_CPP, else .llama-cpp beside halo's environment, when it exists).",
)
@click.option("--no-llama-cpp", is_flag=True, help="Write a halo.toml without llama.cpp.")
@click.option(
    "--bare/--installed",
    default=True,
    show_default=True,
    help="Bare: nodes do not see halo's environment (only the system Python, and the engine "
    "as a container offers it); halo sends its node code over SSH. Installed: nodes run this "
    "halo (halo.toml names it).",
)
@click.option(
    "--fabric-rate",
    metavar="RATE",
    help="Limit every node's fabric link to RATE both ways (the kernel's tbf qdisc), e.g. 1gbit, "
    "2.5gbit, 10gbit: a lab that behaves like that Ethernet (bandwidth only: no latency added).",
)
@click.option(
    "--store-size",
    metavar="SIZE",
    help="Make every node's model store a tmpfs of SIZE (e.g. 64m): a small disk that fills. "
    "Default: a directory on the host's disk, seen only by its node.",
)
@choice_option(
    "--topology",
    choices=["switch", "mesh", "ring"],
    default="switch",
    help="switch: every node on one fabric bridge. mesh: a cable between every pair of nodes "
    "(at most 8); ring: each node cabled to its two neighbours (3 or more). Cable ends are "
    "named thunderbolt0, thunderbolt1, ... as USB4 networking names them, each its own "
    "point-to-point link, unaddressed: 'halo setup --apply' addresses and routes them.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the lab's status as JSON.")
def up(
    nodes: int,
    name: str | None,
    fabric_mtu: int,
    directory: str | None,
    engine: str | None,
    no_engine: bool,
    llama_cpp: str | None,
    no_llama_cpp: bool,
    bare: bool,
    fabric_rate: str | None,
    store_size: str | None,
    topology: str,
    as_json: bool,
) -> int:
    """Create the lab and start sshd on every node; writes halo.toml, ssh_config and keys.
    Each node has its own model store (/var/lib/halo/models), invisible to the host's other
    nodes, so 'halo model sync' copies for real."""
    from halo_cluster.config import default_engine, default_llama_cpp
    from halo_cluster.lab.lab import Lab

    lab_name, path = _resolve(name or "lab", directory)
    start = time.monotonic()
    halo = None if bare else str(Path(sys.executable).parent / "halo")
    engine = None if no_engine else engine or default_engine()
    llama_cpp = None if no_llama_cpp else llama_cpp or default_llama_cpp()
    state = Lab(progress=None if as_json else lambda m: click.echo(f"  {m}", err=True)).up(
        lab_name,
        path,
        nodes,
        fabric_mtu,
        halo,
        engine,
        llama_cpp,
        fabric_rate,
        store_size,
        topology,
    )
    if as_json:
        emit_json(_status(state))
    else:
        click.echo(f"lab {lab_name} up: {nodes} nodes in {time.monotonic() - start:.1f} s")
        click.echo(
            f"  engine: {state.engine} (read-only on every node)"
            if state.engine
            else "  engine: none (build it with 'make engine'; halo serve needs it)"
        )
        click.echo(
            f"  llama.cpp: {state.llama_cpp} (read-only on every node)"
            if state.llama_cpp
            else "  llama.cpp: none (build it with 'make llama-cpp' for --engine llama.cpp)"
        )
        click.echo(
            "  nodes: bare (halo's node code is sent over SSH)"
            if state.halo is None
            else f"  nodes: halo installed ({state.halo})"
        )
        if state.routed:
            count = sum(len(n.links) for n in state.nodes) // 2
            click.echo(
                f"  fabric: a {state.topology} of {count} cables, not yet addressed: "
                f"halo setup --node ... --apply --config {Path(state.dir) / 'halo.toml'}"
            )
        if state.fabric_rate:
            where = "cable" if state.routed else "node"
            click.echo(f"  fabric: {state.fabric_rate} per {where}, both ways (tbf)")
        if state.store_size:
            click.echo(f"  model stores: tmpfs of {state.store_size} per node")
        click.echo(f"  halo doctor --config {Path(state.dir) / 'halo.toml'}")
        click.echo(f"  ssh -F {Path(state.dir) / 'ssh_config'} node1")
    return 0


@lab.command("down")
@lab_options
def down(name: str | None, directory: str | None) -> int:
    """Remove every process, namespace, link and bridge of the lab (a missing lab is fine),
    also when its directory is gone: whatever is named after it goes."""
    from halo_cluster.lab.lab import Lab, require_tools
    from halo_cluster.lab.registry import sweep
    from halo_cluster.lab.state import read_state, registered

    tools = require_tools()
    lab_name, path = _resolve(name, directory)
    state = read_state(path) or registered(lab_name)
    if state is not None:
        Lab().down(state)
        click.echo(f"lab {state.name} removed")
        return 0
    found = sweep(lab_name, tools["ip"])
    if found:
        click.echo(f"lab {lab_name}: its directory was gone; removed {found.describe()}")
    else:
        click.echo(f"no lab named {lab_name}: nothing to remove")
    return 0


def _status(state) -> dict[str, object]:  # type: ignore[no-untyped-def]
    from halo_cluster.lab.lab import sshd_answers

    return {
        "name": state.name,
        "dir": state.dir,
        "config": str(Path(state.dir) / "halo.toml"),
        "halo": state.halo,  # null: bare nodes
        "fabric_rate": state.fabric_rate,  # null: unlimited
        "store_size": state.store_size,  # null: a directory on the host's disk
        "topology": state.topology,
        "nodes": [
            {
                "name": n.name,
                "mgmt_address": n.mgmt_address,
                "fabric_address": n.fabric_address,  # on a mesh or ring: the identity
                "links": [{"ifname": i, "peer": p} for i, p in n.links],
                "sshd": sshd_answers(n.mgmt_address),
            }
            for n in state.nodes
        ],
    }


@lab.command("status")
@lab_options
@click.option(
    "--json", "as_json", is_flag=True, help="Print {name, dir, config, nodes: [...]} as JSON."
)
def status(name: str | None, directory: str | None, as_json: bool) -> int:
    """Show the lab's nodes, addresses and whether each node's sshd answers."""
    data = _status(_state(name, directory))
    if as_json:
        emit_json(data)
        return 0
    from halo_cluster.cli.output import console

    grid = table(
        f"Lab {data['name']} ({data['topology']}, {data['config']})",
        "node",
        "management",
        "fabric",
        "cables",
        "sshd",
    )
    for node in data["nodes"]:  # type: ignore[attr-defined]
        grid.add_row(
            node["name"],
            node["mgmt_address"],
            node["fabric_address"],
            ", ".join(f"{c['ifname']}→{c['peer']}" for c in node["links"]) or "-",
            styled("[green]up[/]" if node["sshd"] else "[red]down[/]"),
        )
    console().print(grid)
    return 0


@lab.command("exec", context_settings={"ignore_unknown_options": True})
@lab_options
@click.argument("node")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_(name: str | None, directory: str | None, node: str, command: tuple[str, ...]) -> int:
    """Run COMMAND inside NODE (its network, PID, mount and UTS namespaces).

    Example: halo lab exec node1 -- ip -br addr"""
    from halo_cluster.lab.lab import Lab

    state = _state(name, directory)
    member = state.node(node)
    argv = Lab().exec_argv(member, command, state.home(member))
    return subprocess.run(argv, check=False).returncode


def _fault(
    name: str | None, directory: str | None, node: str, net: str, up: bool, link: str | None
) -> int:
    from halo_cluster.lab.lab import Lab
    from halo_cluster.lab.processes import pid_alive

    state = _state(name, directory)
    lab = Lab()
    member = state.node(node)
    if up and (member.init_pid is None or not pid_alive(member.init_pid)):
        state = lab.restart(state, member)  # a killed node boots again
        click.echo(f"{node}: restarted")
    names = lab.set_link(state.node(node), net, up, link)
    click.echo(f"{node}: {net} link {', '.join(names)} {'up' if up else 'down'}")
    return 0


LINK_HELP = "On a mesh or ring: only the cable on this interface of NODE (default: all)."


def fault_options(command: F) -> F:
    """The lab, --net, --link and NODE: what 'cut' and 'heal' act on."""
    command = click.argument("node")(command)
    command = click.option("--link", metavar="IF", help=LINK_HELP)(command)
    command = choice_option("--net", choices=["fabric", "mgmt"], default="fabric")(command)
    return lab_options(command)


@lab.command("cut")
@fault_options
def cut(name: str | None, directory: str | None, net: str, link: str | None, node: str) -> int:
    """Take NODE's link down (a pulled cable)."""
    return _fault(name, directory, node, net, False, link)


@lab.command("heal")
@fault_options
def heal(name: str | None, directory: str | None, net: str, link: str | None, node: str) -> int:
    """Bring NODE's link back up (and boot it again after 'halo lab kill')."""
    return _fault(name, directory, node, net, True, link)


@lab.command("kill")
@lab_options
@click.argument("node")
def kill(name: str | None, directory: str | None, node: str) -> int:
    """Stop every process of NODE, sshd included (a crashed machine)."""
    from halo_cluster.lab.lab import Lab

    state = _state(name, directory)
    Lab().kill(state, state.node(node))
    click.echo(f"{node}: every process stopped")
    return 0


@lab.command("boot")
@lab_options
@click.argument("node")
def boot(name: str | None, directory: str | None, node: str) -> int:
    """Start a killed NODE again (a machine that reboots): a new init and sshd in the same
    network namespace; its model store is on disk and survives, what was in memory does not."""
    from halo_cluster.lab.lab import Lab

    state = _state(name, directory)
    Lab().restart(state, state.node(node))
    click.echo(f"{node}: booted")
    return 0


@lab.command("profile")
@click.option(
    "--llama-cpp",
    metavar="DIR",
    help="llama.cpp build to measure (default: $HALO_LLAMA_CPP, else .llama-cpp beside halo's "
    "environment, when it exists).",
)
@click.option(
    "--engine",
    metavar="DIR",
    help="vLLM's environment to measure (default: $HALO_ENGINE, else .venv-engine beside "
    "halo's environment, when it exists).",
)
@click.option("--no-engine", is_flag=True, help="Measure llama.cpp only (vLLM takes a minute).")
@click.option(
    "--gguf",
    type=click.Path(dir_okay=False, exists=True),
    help="The model llama.cpp runs (default: the lab's tiny model, written for the run).",
)
@click.option(
    "--checkpoint",
    type=click.Path(file_okay=False, exists=True),
    help="The same model for vLLM, a Hugging Face directory (default: the lab's tiny model).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON.")
def profile(
    llama_cpp: str | None,
    engine: str | None,
    no_engine: bool,
    gguf: str | None,
    checkpoint: str | None,
    as_json: bool,
) -> int:
    """Measure this machine as the lab's hardware, for 'halo plan --hardware lab': the
    memory bandwidth of one thread, the loopback link (latency, one TCP stream), and per
    engine runs of the lab's tiny model on this machine (llama.cpp: llama-bench alone, and
    with one ggml-rpc-server over loopback; vLLM: TP=1, and TP=2 through its multi-node
    executor over loopback, their requests taking turns). Pinned as lab nodes run (head on
    core 0, the next node on core 1); a minute, four with vLLM. Kept in
    $XDG_DATA_HOME/halo/hardware/lab.json."""
    from halo_cluster.config import default_engine, default_llama_cpp, profiles_dir
    from halo_cluster.errors import UsageError
    from halo_cluster.lab.profile import Profiler, write_profile

    build = llama_cpp or default_llama_cpp()
    if build is None:
        raise UsageError(
            "no llama.cpp build: pass --llama-cpp DIR or build it with 'make llama-cpp'"
        )
    say = None if as_json else (lambda m: click.echo(f"  {m}", err=True))
    vllm = None if no_engine else engine or default_engine()
    document = Profiler(
        build, progress=say, gguf=gguf, engine=vllm, checkpoint=checkpoint
    ).measure()
    path = write_profile(document, profiles_dir())
    if as_json:
        emit_json(document)
        return 0
    click.echo(f"profile written to {path}")
    click.echo(
        f"  memory bandwidth {document['memory_bw_gbs']:g} GB/s (one thread), "
        f"{document['shared_cores']} cores shared by the nodes"
    )
    link = document["link"]
    click.echo(f"  loopback: α {link['alpha_us']:g} µs, β {link['beta_gbps']:g} Gb/s")
    for name, figures in document["engines"].items():
        stages = figures.get("per_stage_us", {})
        click.echo(
            f"  {name}: {figures['per_layer_us']:g} µs per layer"
            + (f", {stages['tcp']:g} µs per RPC stage" if "tcp" in stages else "")
            + (
                f", {figures['per_collective_us']:g} µs per all-reduce"
                if "per_collective_us" in figures
                else ""
            )
        )
        waits = figures.get("shared_core_allreduce_us", {})
        if waits:
            click.echo(
                f"  {name}: a bare all-reduce waits "
                + ", ".join(f"{us:g} µs at {ranks} ranks" for ranks, us in waits.items())
                + " on the shared cores"
            )
    click.echo("  halo plan --gguf MODEL --engine llama.cpp --hardware lab --link lab --nodes 4")
    return 0


@lab.command("rate")
@lab_options
@click.option("--json", "as_json", is_flag=True, help="Print the lab's status as JSON.")
@click.argument("rate")
def rate(name: str | None, directory: str | None, rate: str, as_json: bool) -> int:
    """Limit every node's fabric link to RATE both ways (the kernel's tbf qdisc), e.g. 1gbit,
    2.5gbit, 10gbit; 'off' removes the limit. The lab keeps running: servers and their
    connections stay up, the next packets see the new rate."""
    from halo_cluster.lab.lab import Lab

    state = Lab().set_rate(_state(name, directory), None if rate == "off" else rate)
    if as_json:
        emit_json(_status(state))
    else:
        click.echo(f"fabric: {state.fabric_rate or 'no limit'} on every node's link")
    return 0


def _size(count: float, units: tuple[str, ...], step: float) -> str:
    """1234567 -> '1.2 M'; whole numbers lose their '.0'."""
    for unit in units:
        if count < step or unit == units[-1]:
            return f"{f'{count:.1f}'.removesuffix('.0')} {unit}".rstrip()
        count /= step
    raise AssertionError("unreachable")


@lab.command("model")
@click.argument("directory", metavar="DIR", type=click.Path(path_type=Path))
@range_option("--layers", default=4, low=1, high=64, help="Decoder layers.")
@range_option("--hidden", default=256, low=32, high=8192, help="Hidden size.")
@range_option("--heads", default=8, low=1, high=128, help="Attention heads.")
@range_option("--kv-heads", default=4, low=1, high=128, help="Key/value heads.")
@range_option("--vocab", default=4096, low=512, high=65536, help="Tokens.")
@range_option("--seed", default=0, low=0, high=2**63 - 1, help="Weights' seed.")
@choice_option(
    "--format",
    "formats",
    choices=["safetensors", "gguf", "both"],
    default="safetensors",
    help="safetensors: a Hugging Face checkpoint for vLLM; gguf: DIR/model.gguf for "
    "llama.cpp; both: the two, with the same weights.",
)
@click.option("--force", is_flag=True, help="Write into a non-empty DIR (overwrites our files).")
@click.option(
    "--json", "as_json", is_flag=True, help="Print {dir, parameters, bytes, files, ...} as JSON."
)
def model(
    directory: Path,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    vocab: int,
    seed: int,
    formats: str,
    force: bool,
    as_json: bool,
) -> int:
    """Write a tiny random Llama model (config, bf16 safetensors, BPE tokenizer) into DIR,
    or as one GGUF file (DIR/model.gguf) for llama.cpp.

    Nothing is downloaded: vLLM and transformers load DIR with HF_HUB_OFFLINE=1.
    Example: halo lab model /tmp/tiny && vllm serve /tmp/tiny"""
    from halo_cluster.lab.tiny_model import FORMATS, write_model
    from halo_cluster.lab.tiny_spec import TinyModelSpec

    spec = TinyModelSpec(layers, hidden, heads, kv_heads, vocab, seed).validate()
    chosen = FORMATS if formats == "both" else (formats,)
    summary = write_model(directory, spec, force=force, formats=chosen)
    if as_json:
        emit_json(summary.to_dict())
        return 0
    params = _size(summary.parameters, ("", "k", "M", "G"), 1000)
    size = _size(sum(summary.files.values()), ("B", "KiB", "MiB", "GiB"), 1024)
    click.echo(
        f"wrote {summary.dir}: {summary.to_dict()['architecture']}, {params} parameters, "
        f"{size} in {len(summary.files)} files"
    )
    return 0
