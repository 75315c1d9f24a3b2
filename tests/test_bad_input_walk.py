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


def bad_files(tmp: Path) -> dict[str, Path]:
    """Files given where halo reads one: a FIFO and a device (neither may be waited on or
    read without end), a GGUF with one huge metadata array (a 64 MiB sparse file), and
    result files with numbers out of range or nesting 100 000 deep."""
    import struct

    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text)) + text.encode()

    made = {"a FIFO": tmp / "fifo.json", "/dev/zero": Path("/dev/zero")}
    os.mkfifo(made["a FIFO"])
    gguf = made["a GGUF with a huge array"] = tmp / "huge.gguf"
    with gguf.open("wb") as out:
        arch = string("general.architecture") + struct.pack("<I", 8) + string("llama")
        out.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + arch)
        out.write(string("huge") + struct.pack("<IIQ", 9, 8, (64 << 20) // 8 - 100))
        out.truncate(64 << 20)
    net = '{"schema": "halo.bench.net/1", "kind": "net", "paths": [{"node": "a", "peer": "b", "path": "mgmt", "latency_us": {"p50": %s, "tool": "t"}}]}'
    serve = '{"schema": "halo.bench.serve/1", "levels": [{"concurrency": 1, "output_tokens_per_s": %s}], "input_len": 1, "output_len": 1}'
    coll = '{"schema": "halo.bench.collective/1", "fit": {"alpha_us": %s, "beta_gbps": 1}}'
    for kind, text in (("net", net), ("serve", serve), ("collective", coll)):
        for what, number in (("1e400", "1e400"), ("10**400", "1" + "0" * 400)):
            made[f"a {kind} result with {what}"] = tmp / f"{kind}-{what}.json"
            made[f"a {kind} result with {what}"].write_text(text % number)
        made[f"a {kind} result 100 000 deep"] = tmp / f"{kind}-deep.json"
        made[f"a {kind} result 100 000 deep"].write_text(text % ("[" * 100_000 + "]" * 100_000))
    return made


def test_every_file_input_with_every_bad_file(tmp_path: Path) -> None:
    made = bad_files(tmp_path)
    inputs = {
        "results show": lambda p: ["results", "show", str(p)],
        "report": lambda p: ["report", str(p), "-o", str(tmp_path / "r.html")],
        "plan --calibrate": lambda p: ["plan", "llama-3.1-8b", "--calibrate", str(p)],
        "plan --link": lambda p: ["plan", "llama-3.1-8b", "--link", str(p)],
        "plan --hf-config": lambda p: ["plan", "--hf-config", str(p)],
        "plan --gguf": lambda p: ["plan", "--gguf", str(p)],
    }
    for what, path in made.items():
        if path.suffix == ".json" and "result" in what:
            wanted = {
                "results show",
                "report",
                "plan --calibrate",
                "plan --link",
                "plan --hf-config",
            }
        elif path.suffix == ".gguf":
            wanted = {"plan --gguf", "results show", "plan --hf-config"}
        else:
            wanted = set(inputs)
        for name in sorted(wanted):
            argv = inputs[name](path)
            if name == "plan --link" and not str(path).endswith(".json"):
                continue  # not a file name to --link: a link profile id, refused as unknown
            done = subprocess.run(
                [HALO, *argv], capture_output=True, text=True, timeout=60, check=False
            )
            where = f"{name} with {what}"
            assert "Traceback" not in done.stderr, where
            assert done.returncode == 2, f"{where}: exit {done.returncode}: {done.stderr}"
            lines = done.stderr.splitlines()
            assert len(lines) == 1 and lines[0].startswith("halo: error: "), (
                f"{where}: {done.stderr}"
            )
            assert len(lines[0]) < 400, f"{where}: {lines[0][:400]}"
