"""The options many commands share (``--config``, ``--json``, ``--out``) and the one way a
command finds and loads the cluster config. Imports nothing heavy: every command module
imports this at ``halo --help`` time."""

from __future__ import annotations

from collections.abc import Callable
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
