"""The options many commands share (``--config``, ``--json``, ``--out``, ``--root``), the
shapes most options take (one of a few choices, a number in a range: their defaults shown in
``--help``) and the one way a command finds and loads the cluster config. Imports nothing
heavy: every command module imports this at ``halo --help`` time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import click

if TYPE_CHECKING:
    from halo_cluster.config import Config

F = TypeVar("F", bound=Callable[..., object])

CONFIG_HELP = "Cluster config (default ./halo.toml, then $XDG_CONFIG_HOME/halo/halo.toml)."
NO_CONFIG = "no cluster config: pass --config halo.toml (halo lab up writes one)"


def config_option(help: str = CONFIG_HELP) -> Callable[[F], F]:
    """``--config FILE`` into the ``config_path`` parameter."""
    return click.option("--config", "config_path", metavar="FILE", help=help)


def json_option(help: str) -> Callable[[F], F]:
    """``--json`` into the ``as_json`` parameter; ``help`` names what is printed."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def root_option(help: str) -> Callable[[F], F]:
    """``--root DIR`` (default ``/``): the node whose files are below DIR."""
    return click.option("--root", default="/", show_default=True, metavar="DIR", help=help)


def choice_option(
    *names: str, choices: Sequence[str], default: str, help: str | None = None
) -> Callable[[F], F]:
    """An option that takes one of ``choices``; ``default`` is shown in --help."""
    return click.option(
        *names, type=click.Choice(list(choices)), default=default, show_default=True, help=help
    )


def range_option(
    *names: str, default: float, low: float, high: float, help: str | None = None
) -> Callable[[F], F]:
    """A number from ``low`` to ``high``, a whole one when ``default`` and both bounds are
    ints; ``default`` is shown in --help."""
    kind: click.IntRange | click.FloatRange
    if isinstance(default, int) and isinstance(low, int) and isinstance(high, int):
        kind = click.IntRange(low, high)
    else:
        kind = click.FloatRange(low, high)
    return click.option(*names, default=default, show_default=True, type=kind, help=help)


def result_options(command: F) -> F:
    """--out FILE and --json, as every benchmark takes them."""
    command = json_option("Print the result as JSON.")(command)
    return click.option(
        "--out", metavar="FILE", help="Result file (default: the results directory)."
    )(command)


def require_config(config_path: str | None, missing: str = NO_CONFIG) -> Config:
    """The cluster config: --config FILE, else the default places; a UsageError saying
    ``missing`` when there is none."""
    from halo_cluster.config import find_config, load_config
    from halo_cluster.errors import UsageError

    path = find_config(config_path)
    if path is None:
        raise UsageError(missing)
    return load_config(path)
