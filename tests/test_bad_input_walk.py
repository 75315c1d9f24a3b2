"""Every command, walked with the bad inputs a careful operator (or an attacker) gives it:
a one-line error and a usage exit code, never a traceback, never a hang."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
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


def bad_node_code_caches(cache: Path, digest: str) -> dict[str, Callable[[], object]]:
    """Ways a node's cache of halo's node code (``cache`` = XDG_CACHE_HOME/halo) goes bad,
    each applied to a good one."""
    code = cache / f"node-{digest}.pyz"
    compiled = cache / f"node-{digest}.{sys.implementation.cache_tag}"
    entry = compiled / "halo_cluster.node.main.bin"

    def instead(path: Path, make: Callable[[Path], object]) -> Callable[[], object]:
        return lambda: (path.unlink(), make(path))

    def sparse(path: Path) -> None:
        with path.open("wb") as out:
            out.truncate(1 << 30)

    return {
        "a FIFO as the code": instead(code, os.mkfifo),
        "/dev/zero as the code": instead(code, lambda p: p.symlink_to("/dev/zero")),
        "a 1 GiB sparse file as the code": instead(code, sparse),
        "a directory as the code": instead(code, Path.mkdir),
        "a FIFO as a compiled entry": instead(entry, os.mkfifo),
        "/dev/zero as a compiled entry": instead(entry, lambda p: p.symlink_to("/dev/zero")),
        "a 1 GiB compiled entry": instead(entry, sparse),
        "a damaged compiled entry": lambda: entry.write_bytes(entry.read_bytes()[:-9] + b"x" * 9),
        "a cache others can write": lambda: cache.chmod(0o777),
        "compiled code others can write": lambda: compiled.chmod(0o777),
        "the code writable by others": lambda: code.chmod(0o666),
    }


def test_bad_node_code_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """halo's node code on a node whose cache went bad: it runs (the cache repaired), or one
    line says why not and how to fix it; never a traceback, a hang or an unbounded read."""
    from halo_cluster.nodecode import node_code
    from halo_cluster.runner.local import LocalRunner
    from halo_cluster.runner.node_code import NodeRunner

    code = node_code()
    argv = code.argv(sys.executable, ["node-info"])
    for what in bad_node_code_caches(tmp_path / "x" / "halo", code.digest):
        home = tmp_path / what.replace(" ", "-").replace("/", "")
        monkeypatch.setenv("XDG_CACHE_HOME", str(home))
        assert NodeRunner(LocalRunner(), sys.executable, code).run(argv).ok  # a good cache
        bad_node_code_caches(home / "halo", code.digest)[what]()
        done = NodeRunner(LocalRunner(), sys.executable, code).run(argv, timeout=60)
        lines = done.stderr.splitlines()
        assert "Traceback" not in done.stderr and done.returncode != 124, f"{what}: {done}"
        assert done.ok or (done.returncode in (95, 96) and len(lines) == 1), f"{what}: {done}"
        assert done.ok or lines[0].startswith("halo-node: "), what
