"""The node-side commands (argparse, standard library only): what ``halo`` runs on a node over
SSH. Each prints JSON (or a line) on stdout; errors are one line on stderr with halo's exit
codes. The same argv works through an installed ``halo`` (its hidden commands hand over here)
and through the zipapp halo sends (``python3 -c BOOT HASH COMMAND…``).

This module only dispatches: the commands and their arguments are the wire's
(``wire/commands.py``), each command's body is in ``node/handlers.py``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from halo_cluster.node.handlers import HANDLERS
from halo_cluster.wire.commands import COMMANDS, FLAG, METAVARS, STR, Arg, Command, read_value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2 (usage), as halo's CLI
        sys.stderr.write(f"halo: error: {self.prog}: {message}\n")
        sys.exit(2)


def parser() -> argparse.ArgumentParser:
    """The parser of every node command, built from the wire's definitions."""
    top = _Parser(prog="halo", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        _add_arguments(sub.add_parser(command.name), command)
        sub.choices[command.name].set_defaults(handler=HANDLERS[command.name])
    return top


def _add_arguments(command_parser: argparse.ArgumentParser, command: Command) -> None:
    if command.modes:
        modes = command_parser.add_subparsers(dest="mode", required=True, parser_class=_Parser)
        for mode in command.modes:
            _add_arguments(modes.add_parser(mode.name), mode)
    for arg in command.args:
        _add_argument(command_parser, arg)


def _add_argument(command_parser: argparse.ArgumentParser, arg: Arg) -> None:
    if arg.kind == FLAG:
        command_parser.add_argument(arg.name, action="store_true", help=arg.help)
        return
    options: dict[str, Any] = {"help": arg.help}
    if arg.kind != STR:
        options["type"] = _reader(arg)
    if arg.choices:
        options["choices"] = arg.choices
    if not arg.positional:
        options["metavar"] = METAVARS.get(arg.kind)
        options["required"] = arg.required
        options["default"] = [] if arg.many else arg.default
    if arg.many:
        options["action"] = "append"
    command_parser.add_argument(arg.name, **options)


def _reader(arg: Arg) -> Callable[[str], Any]:
    """The wire's reading of ``arg``; its one-line reason as argparse's usage error."""

    def read(text: str) -> Any:
        try:
            return read_value(arg, text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return read


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
