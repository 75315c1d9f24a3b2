"""``halo setup`` (the guide's host steps, idempotent) and ``halo container``."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from halo_cluster.cli.options import choice_option, config_option, range_option, root_option
from halo_cluster.cli.output import styled, table
from halo_cluster.jsonout import emit_json

if TYPE_CHECKING:
    from halo_cluster.setup.steps import SetupOptions

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
]


@click.command()
@click.option(
    "--node",
    "names",
    multiple=True,
    metavar="NAME",
    help="Set up these nodes of halo.toml over SSH.",
)
@click.option("--local", is_flag=True, help="Set up this machine (the default without --node).")
@config_option("Cluster config for --node.")
@root_option("Plan for the node below DIR.")
@choice_option("--distro", choices=["auto", "fedora", "ubuntu", "debian"], default="auto")
@click.option(
    "--fabric-iface", metavar="IF", help="The fabric interface (default: the transport plan's)."
)
@click.option("--address", metavar="CIDR", help="Static fabric address, e.g. 192.168.100.1/30.")
@range_option("--mtu", default=9000, low=1280, high=65520)
@click.option(
    "--step", "steps", multiple=True, type=click.Choice(STEP_IDS), help="Only these steps."
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print {nodes: {name: {steps, reboot_needed, applied}}}.",
)
@click.option(
    "--apply", "do_apply", is_flag=True, help="Run the pending steps (nothing changes without it)."
)
@click.option("--yes", is_flag=True, help="Do not ask before applying.")
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
    this node's memory), memlock and SSH key. Each step says whether it is done, the exact
    commands, and whether a reboot follows. Running it twice changes nothing the second time.

    On nodes cabled point to point (links in halo.toml: a USB4 mesh or ring), the fabric steps
    replace the one interface's: every cable's /31 and MTU ([fabric]), the node's identity
    address (fabric_address) on its own interface, routes to every other node (static, or
    FRR's openfabric), and forwarding where a path crosses the node."""
    from halo_cluster.setup.steps import SetupOptions

    opts = SetupOptions(distro, fabric_iface, address, mtu, str(Path.home()).lstrip("/"))
    only = set(steps) or None
    if names and not local:
        data = _remote(names, config_path, opts, steps, do_apply, yes)
    else:
        data = {_hostname(root): _local(root, opts, only, do_apply, yes, quiet=as_json)}
    if as_json:
        emit_json({"nodes": data})
    else:
        _render(data)
    return 0


def _hostname(root: str) -> str:
    from halo_cluster.facts.inventory import collect_inventory

    return collect_inventory(root).hostname or "local"


def _local(
    root: str, opts: SetupOptions, only: set[str] | None, do_apply: bool, yes: bool, quiet: bool
) -> dict[str, Any]:
    from halo_cluster.setup.apply import setup_here

    def confirm(pending: list[str]) -> None:
        if not yes:
            click.confirm(f"apply {', '.join(pending)}?", abort=True, err=True)

    progress = None if quiet else lambda m: click.echo(f"applying {m}", err=True)
    return setup_here(root, opts, only, do_apply, confirm, progress)


def _remote(
    names: tuple[str, ...],
    config_path: str | None,
    opts: SetupOptions,
    steps: tuple[str, ...],
    do_apply: bool,
    yes: bool,
) -> dict[str, Any]:
    from halo_cluster.cli.options import require_config
    from halo_cluster.client.node import ssh_clients
    from halo_cluster.errors import NodeCallError, SetupError
    from halo_cluster.wire.args import setup_args

    config = require_config(config_path, "--node needs a cluster config: --config halo.toml")
    for name in names:
        config.node(name)  # an unknown name is a usage error before anything runs
    clients = ssh_clients(config)
    if do_apply and not yes:
        click.confirm(f"apply pending setup steps on {', '.join(names)}?", abort=True, err=True)
    mesh = config.mesh()
    data = {}
    for name in names:
        fabric = json.dumps(mesh.node(name).to_dict()) if mesh is not None else None
        args = setup_args(
            opts.distro,
            opts.mtu,
            steps,
            opts.fabric_iface,
            opts.address,
            apply=do_apply,
            fabric=fabric,
        )
        try:
            answer = clients[name].call_json(*args, timeout=900)
        except NodeCallError as err:
            raise SetupError(str(err)) from None
        data[name] = next(iter(answer["nodes"].values()))
    return data


def _render(data: dict[str, Any]) -> None:

    from halo_cluster.cli.output import console

    out = console()
    for name, node in data.items():
        grid = table(f"Setup of {name}", "step", "state", "commands", "note")
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
