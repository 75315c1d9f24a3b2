"""The ``halo`` command line: thin click commands that parse, call the core, render, exit.

Subcommands are imported only when used, so ``halo --help`` stays fast: command modules
import nothing heavy at module level.
"""

from __future__ import annotations

import importlib
import sys

import click

from halo_cluster import __version__
from halo_cluster.errors import EXIT_CODES, HaloError, exit_code

# name -> "module:attribute"; kept in one table so the help listing needs no imports of the core.
COMMANDS = {
    "bench": "halo_cluster.cli.bench:bench",
    "container": "halo_cluster.cli.setup:container",
    "demo": "halo_cluster.cli.demo:demo",
    "doctor": "halo_cluster.cli.doctor:doctor",
    "down": "halo_cluster.cli.cluster:down",
    "env": "halo_cluster.cli.transport:env_command",
    "exporter": "halo_cluster.cli.monitor:exporter",
    "gateway": "halo_cluster.cli.gateway:gateway",
    "inventory": "halo_cluster.cli.inventory:inventory",
    "lab": "halo_cluster.cli.lab:lab",
    "model": "halo_cluster.cli.model:model",
    "monitoring": "halo_cluster.cli.monitor:monitoring",
    "plan": "halo_cluster.cli.capacity:plan",
    "report": "halo_cluster.cli.results:report",
    "results": "halo_cluster.cli.results:results",
    "logs": "halo_cluster.cli.serve:logs",
    "run": "halo_cluster.cli.recipes:run_command",
    "serve": "halo_cluster.cli.serve:serve",
    "setup": "halo_cluster.cli.setup:setup",
    "status": "halo_cluster.cli.cluster:status",
    "stop": "halo_cluster.cli.serve:stop",
    "top": "halo_cluster.cli.monitor:top",
    "tune": "halo_cluster.cli.recipes:tune",
    "up": "halo_cluster.cli.cluster:up",
    "verify-log": "halo_cluster.cli.transport:verify_log",
}


def _node_only(args: list[str]) -> bool:
    """A node-side command (halo_cluster.wire) that this CLI has no command of its own for
    (it has ``inventory``, ``setup``, ``exporter``): run on nodes over SSH, not for people. An
    installed halo hands it over, so a node runs the same code with or without halo."""
    if not args or args[0].startswith("-") or args[0] in COMMANDS:
        return False
    from halo_cluster.wire import NAMES

    return args[0] in NAMES


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="halo")
def cli() -> None:
    """halo: one tensor-parallel LLM inference cluster from a few RDMA-linked machines,
    and proof that the fabric does its job.

    Every command takes --json for a stable machine-readable output.
    """


def main(argv: list[str] | None = None) -> None:
    """Entry point: maps halo's one-line errors and Ctrl-C to exit codes (errors.EXIT_CODES),
    never a traceback. Click's own usage errors keep click's code (2)."""
    args = sys.argv[1:] if argv is None else argv
    if _node_only(args):
        from halo_cluster.node.main import main as node_main

        sys.exit(node_main(args))
    try:
        result = cli.main(args=argv, prog_name="halo", standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except click.Abort:
        click.echo("halo: aborted", err=True)
        sys.exit(EXIT_CODES[KeyboardInterrupt])
    except HaloError as err:
        from halo_cluster.printable import printable

        # one line, whatever the message carries from a file, a node or a flag: escaped
        click.echo(f"halo: error: {printable(err)}", err=True)
        sys.exit(exit_code(err))
    except KeyboardInterrupt as err:
        click.echo("halo: interrupted", err=True)
        sys.exit(exit_code(err))
    sys.exit(result if isinstance(result, int) else 0)
