"""``halo setup`` (the guide's host steps, idempotent) and ``halo container``."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from halo_cluster.cli.options import (
    CONFIG_HELP,
    choice_option,
    config_option,
    range_option,
    root_option,
)
from halo_cluster.cli.output import styled, table
from halo_cluster.jsonout import emit_json
from halo_cluster.printable import printable

if TYPE_CHECKING:
    from halo_cluster.config import Config
    from halo_cluster.setup.steps import SetupOptions

CONFIG_PLACES = "--config FILE, ./halo.toml, $XDG_CONFIG_HOME/halo/halo.toml"

STEP_IDS = [
    "packages",
    "nic_firmware",
    "network",
    "fabric_links",
    "fabric_identity",
    "fabric_routes",
    "fabric_forwarding",
    "firewall",
    "kernel",
    "memlock",
    "ssh_key",
    "names",
]


@click.command()
@click.option(
    "--node",
    "names",
    multiple=True,
    metavar="NAME",
    help="Only these nodes of the cluster config (default: every node).",
)
@click.option(
    "--local", is_flag=True, help="This machine only (the default without a cluster config)."
)
@config_option(CONFIG_HELP + " Its nodes are the machines set up.")
@root_option("Plan for the files below DIR (this machine's view, never the nodes').")
@choice_option("--distro", choices=["auto", "fedora", "ubuntu", "debian"], default="auto")
@click.option(
    "--fabric-iface", metavar="IF", help="The fabric interface (default: the transport plan's)."
)
@click.option(
    "--address", metavar="CIDR", help="Static fabric address of one machine, e.g. 192.168.100.1/30."
)
@range_option("--mtu", default=9000, low=1280, high=65520)
@click.option(
    "--step", "steps", multiple=True, type=click.Choice(STEP_IDS), help="Only these steps."
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print {target, config, nodes: {name: {hostname, address, node, steps, "
    "reboot_needed, applied, error}}}.",
)
@click.option(
    "--apply", "do_apply", is_flag=True, help="Run the pending steps (nothing changes without it)."
)
@click.option(
    "--yes",
    is_flag=True,
    help="Do not ask before applying; needed to change a machine that is not a node of the "
    "cluster config.",
)
def setup(
    names: tuple[str, ...],
    local: bool,
    config_path: str | None,
    root: str,
    distro: str,
    fabric_iface: str | None,
    address: str | None,
    mtu: int,
    steps: tuple[str, ...],
    as_json: bool,
    do_apply: bool,
    yes: bool,
) -> int:
    """Show (and with --apply, run) the host setup of the reference guide: packages, NIC
    firmware check, fabric address and MTU, firewall, kernel command line (GTT sized from
    each node's memory), memlock and SSH key. Each step says whether it is done, the exact
    commands, and whether a reboot follows. Running it twice changes nothing the second time.

    With a cluster config (--config, or found), the machines are its nodes (--node: some of
    them), each planned and applied over SSH, all at once; before anything changes, the plan
    names each machine (hostname, address) and its pending steps. --local is this machine
    (the default without a config); with a config, changing it when it is not one of the
    config's nodes needs --yes.

    On nodes cabled point to point (links in halo.toml: a USB4 mesh or ring), the fabric steps
    replace the one interface's: every cable's /31 and MTU ([fabric]), the node's identity
    address (fabric_address) on its own interface, routes to every other node (static, or
    FRR's openfabric), and forwarding where a path crosses the node."""
    from halo_cluster.errors import SetupError
    from halo_cluster.setup.steps import SetupOptions

    opts = SetupOptions(distro, fabric_iface, address, mtu, str(Path.home()).lstrip("/"))
    config = _config(names, local, config_path, root)
    if config is not None and not local:
        target = "nodes"
        data = _nodes(config, names, opts, steps, do_apply, yes, as_json)
    else:
        target = "local"
        data = _here(root, config, opts, set(steps) or None, do_apply, yes, as_json)
    shown = {"target": target, "config": str(config.path) if config else None, "nodes": data}
    if as_json:
        emit_json(shown)
    else:
        _render(data)
    failed = [name for name, node in data.items() if node["error"]]
    if failed:
        raise SetupError(f"setup failed on {', '.join(failed)}: {data[failed[0]]['error']}")
    return 0


def _config(
    names: tuple[str, ...], local: bool, config_path: str | None, root: str
) -> Config | None:
    """The cluster config whose nodes are set up (or that this machine must be a node of):
    --config, else the one found; None without one, and for --root (a directory's files)."""
    from halo_cluster.cli.options import require_config
    from halo_cluster.config import find_config, load_config
    from halo_cluster.errors import UsageError

    if names and local:
        raise UsageError("--local is this machine, --node names nodes of the config: give one")
    if root != "/":
        if names:
            raise UsageError("--root plans for the files below DIR: drop --node, or drop --root")
        return None
    if names:
        return require_config(config_path, "--node needs a cluster config: --config halo.toml")
    path = find_config(config_path)
    return load_config(path) if path is not None else None


def _here(
    root: str,
    config: Config | None,
    opts: SetupOptions,
    only: set[str] | None,
    do_apply: bool,
    yes: bool,
    quiet: bool,
) -> dict[str, Any]:
    """This machine's entry (or the one whose files are below --root), named first."""
    from halo_cluster.errors import UsageError
    from halo_cluster.facts.inventory import collect_inventory
    from halo_cluster.setup.apply import setup_here
    from halo_cluster.setup.targets import this_machine

    machine = this_machine(collect_inventory(root), config)
    if config is None and root == "/":
        where = f"no cluster config ({CONFIG_PLACES}): this machine only, {machine.label()}"
    elif config is None:
        where = f"the files below {root}: {machine.label()}"
    elif machine.node is None:
        where = f"this machine, {machine.label()}, not a node of {config.path}"
        if do_apply and not yes:
            raise UsageError(
                f"this machine, {machine.label()}, is not a node of {config.path}: pass --yes "
                "to change it anyway, or drop --local to set up the config's nodes"
            )
    else:
        where = f"this machine, {machine.label()}, node {machine.node} of {config.path}"
    if do_apply or not quiet:
        click.echo(where, err=True)

    def confirm(pending: list[str]) -> None:
        click.echo(f"will change {machine.label()}: {', '.join(pending)}", err=True)
        if not yes:
            click.confirm("apply these steps?", abort=True, err=True)

    progress = None if quiet else lambda m: click.echo(f"applying {m}", err=True)
    done = setup_here(root, opts, only, do_apply, confirm, progress)
    return {machine.name: {**machine.to_dict(), **done, "error": None}}


def _nodes(
    config: Config,
    names: tuple[str, ...],
    opts: SetupOptions,
    steps: tuple[str, ...],
    do_apply: bool,
    yes: bool,
    quiet: bool,
) -> dict[str, Any]:
    """The config's nodes (or those named): planned, and with --apply changed, all at once,
    over SSH; each node named with its pending steps before any is changed."""
    from halo_cluster.client.node import ssh_clients
    from halo_cluster.errors import UsageError
    from halo_cluster.setup.nodes import apply_nodes, plan_nodes, require_plans

    targets = list(dict.fromkeys(names)) or [n.name for n in config.nodes]
    for name in targets:
        config.node(name)  # an unknown name is a usage error before anything runs
    if opts.address is not None and len(targets) > 1:
        raise UsageError(
            "--address is one machine's fabric address: name that node with --node NAME"
        )
    clients = ssh_clients(config)
    if do_apply or not quiet:
        click.echo(
            f"planning on {len(targets)} node(s) of {config.path} over SSH: {', '.join(targets)}",
            err=True,
        )
    plans = plan_nodes(config, clients, targets, opts, steps)
    if do_apply:
        require_plans(plans)
        for plan in plans:
            pending = ", ".join(plan.pending) or "nothing"
            click.echo(f"will change {plan.machine.label()}: {pending}", err=True)
        changing = [p.machine.name for p in plans if p.pending]
        if changing and not yes:
            click.confirm(f"apply these steps on {', '.join(changing)}?", abort=True, err=True)
        if changing and not quiet:
            click.echo(f"applying on {', '.join(changing)} at once…", err=True)
        plans = apply_nodes(config, clients, plans, opts, steps)
    return {p.machine.name: p.to_dict() for p in plans}


def _render(data: dict[str, Any]) -> None:
    from halo_cluster.cli.output import console
    from halo_cluster.setup.targets import Machine

    out = console()
    for name, node in data.items():
        machine = Machine(name, node["hostname"], node["address"], node["node"])
        if node["error"]:
            out.print(f"{machine.label()}: {printable(node['error'])}", markup=False)
            continue
        grid = table(f"Setup of {machine.label()}", "step", "state", "commands", "note")
        for step in node["steps"]:
            state = styled("[green]done[/]" if step["done"] else "[yellow]pending[/]")
            if step["reboot"]:
                state += " (reboot)"
            grid.add_row(step["id"], state, "\n".join(step["commands"]) or "-", step["note"])
        out.print(grid)
        if node["applied"]:
            out.print(
                f"applied: {', '.join(node['applied'])}"
                + ("; reboot now" if node["reboot_needed"] else "")
            )


@click.command()
@root_option("The node whose devices to pass.")
@choice_option("--engine", choices=["podman", "docker", "toolbox", "distrobox"], default="podman")
@click.option(
    "--image", required=True, help="The serving image (vLLM with ROCm/CUDA and rdma-core >= 62)."
)
@click.option("--name", default="halo-vllm", show_default=True, help="Container name.")
@click.option(
    "--run", "do_run", is_flag=True, help="Create it now instead of printing the command."
)
@click.option("--json", "as_json", is_flag=True, help="Print {argv, command} as JSON.")
def container(root: str, engine: str, image: str, name: str, do_run: bool, as_json: bool) -> int:
    """Print (or with --run, execute) the command that creates the serving container with this
    node's /dev/dri, /dev/kfd and /dev/infiniband, unlimited memlock, host network and IPC."""
    import subprocess

    from halo_cluster.facts.inventory import collect_inventory
    from halo_cluster.setup.container import container_argv, device_gids

    inv = collect_inventory(root)
    argv = container_argv(inv, engine, image, name, device_gids(root, inv))
    if as_json:
        emit_json({"argv": argv, "command": shlex.join(argv)})
    elif not do_run:
        click.echo(shlex.join(argv))
    if do_run:
        # the container needs the user's terminal: not through the Runner (docs/architecture.md)
        return subprocess.run(argv, check=False).returncode
    return 0
