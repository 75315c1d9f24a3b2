"""docs/commands.md is the CLI's own help, as tools/cli_reference.py writes it: a command or
option changed without regenerating it fails here (run the tool with --write)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_command_reference_is_generated_from_the_help() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "cli_reference.py")],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "40"},  # the tool sets its own width
    )
    assert done.stdout == (ROOT / "docs" / "commands.md").read_text(), (
        "docs/commands.md is stale: run tools/cli_reference.py --write"
    )
    assert "## `halo tune`" in done.stdout and "## `halo run`" in done.stdout
