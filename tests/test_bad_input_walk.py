"""Every command, walked with the bad inputs a careful operator (or an attacker) gives it:
a one-line error and a usage exit code, never a traceback, never a hang."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HALO = str(Path(sys.executable).parent / "halo")
CONFIG_COMMANDS = [
    ["doctor"],
    ["up"],
    ["status"],
    ["down"],
    ["serve", "m"],
    ["stop"],
    ["logs"],
    ["bench", "net"],
    ["bench", "collective"],
    ["bench", "tp", "llama-3.1-8b"],
    ["bench", "serve"],
    ["monitoring", "prometheus-config"],
    ["top", "--once"],
    ["exporter", "--once"],
    ["setup", "--node", "n1"],
]
NODE = '[[node]]\nname = "n1"\nssh = "n1"\n'


def bad_configs(tmp: Path) -> dict[str, Path]:
    made = {
        "a directory": tmp / "dir",
        "a FIFO": tmp / "fifo.toml",
        "not UTF-8": tmp / "latin1.toml",
        "nested 100 000 deep": tmp / "deep.toml",
        "an unclosed quote in exec_prefix": tmp / "quote.toml",
        "a hostile cluster name": tmp / "name.toml",
        "an ssh option as target": tmp / "ssh.toml",
    }
    made["a directory"].mkdir()
    os.mkfifo(made["a FIFO"])
    made["not UTF-8"].write_bytes(b'[cluster]\nname = "\xe9t\xe9"\n')
    made["nested 100 000 deep"].write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    made["an unclosed quote in exec_prefix"].write_text(NODE + 'exec_prefix = "toolbox \'run"\n')
    made["a hostile cluster name"].write_text('[cluster]\nname = "a b;reboot"\n' + NODE)
    made["an ssh option as target"].write_text(
        '[[node]]\nname = "n1"\nssh = "-oProxyCommand=touch /tmp/pwned"\n'
    )
    return made


@pytest.mark.parametrize("command", CONFIG_COMMANDS, ids=" ".join)
def test_every_command_with_every_bad_config(tmp_path: Path, command: list[str]) -> None:
    for what, path in bad_configs(tmp_path).items():
        done = subprocess.run(
            [HALO, *command, "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        where = f"{' '.join(command)} with {what}"
        assert "Traceback" not in done.stderr, where
        assert done.returncode == 2, f"{where}: exit {done.returncode}: {done.stderr}"
        lines = [line for line in done.stderr.splitlines() if line.startswith("halo: error:")]
        assert len(lines) == 1, f"{where}: {done.stderr}"
        assert not Path("/tmp/pwned").exists()


def test_bad_roots_and_result_files(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    runs = [
        ["inventory", "--root", str(tmp_path / "missing")],
        ["inventory", "--root", str(fifo)],
        ["env", "--root", str(fifo)],
        ["doctor", "--root", str(fifo)],
        ["results", "show", str(fifo)],
        ["report", str(fifo), "-o", str(tmp_path / "r.html")],
        ["verify-log", str(tmp_path)],
    ]
    for argv in runs:
        done = subprocess.run(
            [HALO, *argv], capture_output=True, text=True, timeout=60, check=False
        )
        assert "Traceback" not in done.stderr, argv
        assert done.returncode == 2, f"{argv}: exit {done.returncode}: {done.stderr}"
