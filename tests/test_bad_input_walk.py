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
    ["model", "sync", "/nonexistent-model"],
    ["model", "ls"],
    ["model", "verify", "m"],
    ["model", "rm", "m"],
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


# what one client may send the exporter (issue 29, N1): each on its own connection, sent as
# far as the sockets take it and never read; a scrape after each must still answer
HOSTILE_CLIENTS = {
    "400 pipelined GET /": b"GET / HTTP/1.1\r\n\r\n" * 400,
    "5000 pipelined GET /metrics": b"GET /metrics HTTP/1.1\r\n\r\n" * 5000,
    "200 pipelined 8 KB headers": (b"GET / HTTP/1.1\r\nX: " + b"a" * 8000 + b"\r\n\r\n") * 200,
    "a header over 8 KB": b"GET / HTTP/1.1\r\nX: " + b"a" * 9000,
    "pipelined bodies": b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc" * 100,
    "pipelined HEAD and bad requests": (
        b"HEAD /metrics HTTP/1.1\r\n\r\nBREW /pot HTCPCP/1.0\r\n\r\nGET /x HTTP/1.1\r\n\r\n"
    )
    * 300,
    "NUL and escape bytes": b"\x00\x1b[2J\xff" * 2000 + b"\r\n\r\n",
    "a TLS hello": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 500,
    "half a request": b"GET /metr",
}


def test_the_exporter_with_every_hostile_client(root_copy) -> None:
    import contextlib
    import socket

    from tests.monitor.test_exporter import get, start_exporter, stop_exporter

    proc, target = start_exporter(root_copy("strix-e810"), "--interval", "200ms")
    host, port = target.split(":")
    try:
        for what, data in HOSTILE_CLIENTS.items():
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    sock.send(data)
                assert "halo_rdma_port_state" in get(f"http://{target}/metrics"), what
            assert proc.poll() is None, what
    finally:
        log = stop_exporter(proc)
    assert log.count("\n") == 1 and "Traceback" not in log, log


def test_model_sync_with_every_bad_source(tmp_path: Path) -> None:
    """Sources that are not models: one line each, before any node is asked."""
    config = tmp_path / "halo.toml"
    config.write_text(NODE.replace('ssh = "n1"', 'ssh = "n1.invalid"'))
    (tmp_path / "empty").mkdir()
    os.mkfifo(tmp_path / "fifo")
    escape = tmp_path / "escape"
    escape.mkdir()
    (escape / "w.bin").symlink_to("/etc/hostname")
    (tmp_path / "x-00001-of-00002.gguf").write_bytes(b"GGUF")
    sources = {
        str(tmp_path / "nope"): "no such file or directory here",
        str(tmp_path / "empty"): "empty: no files",
        str(tmp_path / "fifo"): "fifo: not a directory or a regular file",
        str(escape): "w.bin: links out of",
        str(tmp_path / "x-00001-of-00002.gguf"): "shard x-00002-of-00002.gguf of this split GGUF",
        "n9:/x": "(n9 is not a node of",
    }
    for source, said in sources.items():
        for name in ("", "../up"):
            extra = ["--name", name] if name else []
            done = subprocess.run(
                [HALO, "model", "sync", source, "--config", str(config), *extra],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            lines = done.stderr.strip().splitlines()
            assert done.returncode in (1, 2) and "Traceback" not in done.stderr, (
                source,
                done.stderr,
            )
            assert lines[-1].startswith("halo: error: "), (source, lines)
            if name:  # a bad name is refused before anything is read
                assert lines == [
                    f"halo: error: model name '{name}': use 1-128 letters, "
                    "digits, '.', '_' or '-' (starting with a letter or digit)"
                ]
            else:
                assert said in lines[-1], (source, lines[-1])


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
