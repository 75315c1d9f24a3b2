"""Write docs/commands.md from the CLI's own help, so the reference cannot drift from it.

    .venv/bin/python tools/cli_reference.py           # print it
    .venv/bin/python tools/cli_reference.py --write   # write docs/commands.md

Every command and subcommand of ``halo`` (groups recursively), its usage, options and
description exactly as ``halo COMMAND --help`` prints them at 100 columns. The test
tests/test_cli_reference.py fails when the file differs from what this prints.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

OUT = Path(__file__).resolve().parent.parent / "docs" / "commands.md"
WIDTH = 100
HEAD = """# Command reference

Generated from the CLI's own help by `tools/cli_reference.py` (do not edit: run it with
`--write`). The topic guides say more: [cluster](cluster.md), [tune and run](tune.md),
[supervise](supervise.md), [llama.cpp](llama-cpp.md), [models](models.md), [plan](plan.md),
[bench](bench.md), [lab](lab.md), [doctor](doctor.md), [setup](setup.md),
[transport](transport.md), [monitoring](monitoring.md), [inventory](inventory.md).
"""


def _help(command: click.Command, path: list[str]) -> str:
    info = " ".join(path)
    with click.Context(
        command, info_name=info, terminal_width=WIDTH, max_content_width=WIDTH
    ) as ctx:
        return command.get_help(ctx)


def _walk(command: click.Command, path: list[str]) -> list[tuple[list[str], str]]:
    out = [(path, _help(command, path))]
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            out += _walk(command.commands[name], [*path, name])
    return out


def reference() -> str:
    from halo_cluster.cli import COMMANDS, cli

    sections = [HEAD, f"```\n{_help(cli, ['halo']).rstrip()}\n```\n"]
    for name in sorted(COMMANDS):
        command = cli.get_command(click.Context(cli), name)
        assert command is not None, name
        for path, text in _walk(command, ["halo", name]):
            sections.append(f"## `{' '.join(path)}`\n\n```\n{text.rstrip()}\n```\n")
    return "\n".join(sections)


def main() -> None:
    text = reference()
    if "--write" in sys.argv[1:]:
        OUT.write_text(text)
        print(f"wrote {OUT}")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
