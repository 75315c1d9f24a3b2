"""The node-side commands (halo_cluster.node.main): their JSON against the readers they wrap,
halo's one-line errors and exit codes, the same output under the real Python 3.9 through the
zipapp, and the installed CLI handing them over."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import gguf
import pytest

from halo_cluster.facts.counters import read_paths
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.root import Root
from halo_cluster.node.main import main
from halo_cluster.nodecode import node_code
from halo_cluster.runner.local import LocalRunner
from halo_cluster.runner.node_code import NodeRunner
from tests.conftest import ROOTS, SCENARIOS, free_port, python39

SRC = Path(__file__).resolve().parents[1] / "src"


def run_main(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of main(argv); argparse's usage errors exit (SystemExit)."""
    try:
        code = main(list(argv))
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def py39() -> str:
    """The real CPython 3.9 (looked up before any test moves XDG_CACHE_HOME)."""
    return python39()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "halo"


def write_gguf(path: Path, block_count: int = 3) -> Path:
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(block_count)
    writer.add_context_length(4096)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# -- inventory and counters ------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_inventory_is_the_collected_inventory(
    scenario: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(ROOTS / scenario)
    code, out, err = run_main(["inventory", "--root", root, "--json"], capsys)
    assert (code, json.loads(out), err) == (0, collect_inventory(root).to_dict(), "")


def test_inventory_under_python_3_9_is_byte_for_byte_the_same(
    py39: str, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = node_code()
    runner = NodeRunner(LocalRunner(), py39, code)
    got, expected = {}, {}
    for scenario in SCENARIOS:
        argv = ["inventory", "--root", str((ROOTS / scenario).resolve()), "--json"]
        result = runner.run(code.argv(py39, argv))
        got[scenario] = (result.returncode, result.stdout, result.stderr)
        expected[scenario] = run_main(argv, capsys)
    assert got == expected
    assert runner.sent and (cache / f"node-{code.digest}.pyz").exists()


COUNTERS = [
    (
        "strix-e810",
        ["--fabric", "192.168.100.1", "--mgmt", "192.168.1.51", "--rdma", "rocep194s0:1"],
        ("192.168.100.1", "192.168.1.51", ("rocep194s0", 1)),
        {
            "paths": {
                "fabric": {"name": "enp194s0np0", "rx_bytes": None, "tx_bytes": None},
                "mgmt": {"name": "enp191s0", "rx_bytes": None, "tx_bytes": None},
                "rdma": {
                    "name": "rocep194s0/1",
                    "rx_bytes": 871234561024,
                    "tx_bytes": 918273647168,
                },
            },
            "warnings": [],
        },
    ),
    (
        "strix-e810",
        ["--rdma", "rocep194s0:1"],
        (None, None, ("rocep194s0", 1)),
        {
            "paths": {
                "rdma": {"name": "rocep194s0/1", "rx_bytes": 871234561024, "tx_bytes": 918273647168}
            },
            "warnings": [],
        },
    ),
    (
        "strix-e810",
        ["--fabric", "10.9.9.9", "--rdma", "mlx5_9:1"],
        ("10.9.9.9", None, ("mlx5_9", 1)),
        {
            "paths": {},
            "warnings": ["no interface holds 10.9.9.9 (fabric)", "no RDMA port mlx5_9/1"],
        },
    ),
    ("strix-e810", [], (None, None, None), {"paths": {}, "warnings": []}),
]


@pytest.mark.parametrize(("scenario", "flags", "args", "literal"), COUNTERS)
def test_counters_is_read_paths(
    scenario: str,
    flags: list[str],
    args: tuple[str | None, str | None, tuple[str, int] | None],
    literal: dict[str, object],
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = Root(str(ROOTS / scenario))
    paths = read_paths(root, *args)
    expected = {"paths": {k: v.to_dict() for k, v in paths.items()}, "warnings": root.warnings}
    assert expected == literal
    code, out, err = run_main(["counters", "--root", str(ROOTS / scenario), *flags], capsys)
    assert (code, json.loads(out), err) == (0, expected, "")


def test_other_commands_under_python_3_9_print_the_same(
    py39: str, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = write_gguf(tmp_path / "m.gguf", 5)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04 not a gguf file at all, longer than its header")
    strix = str((ROOTS / "strix-e810").resolve())
    commands = [
        ["counters", "--root", strix, "--fabric", "192.168.100.1", "--rdma", "rocep194s0:1"],
        ["counters", "--root", strix, "--fabric", "10.9.9.9"],
        ["counters", "--rdma", "rocep194s0:one"],
        ["gguf-layers", str(model)],
        ["gguf-layers", str(junk)],
        ["serve-health"],
        ["setup", "--root", strix, "--local", "--json", "--distro", "fedora", "--step=mtu"],
        ["exporter", "--root", strix, "--once", "--peer", "strix2,fabric,192.168.100.2"],
        ["exporter", "--root", strix, "--once", "--interval", "soon"],
        ["exporter", "--root", strix, "--once", "--rescan", "99999999999999999999s"],
        ["net-probe", "ping", f"127.0.0.1:{free_port()}", "--seconds", "0.1"],
    ]
    code = node_code()
    runner = NodeRunner(LocalRunner(), py39, code)
    got = {}
    for argv in commands:
        result = runner.run(code.argv(py39, argv))
        got[" ".join(argv)] = (result.returncode, result.stdout, result.stderr)
    expected = {" ".join(argv): run_main(argv, capsys) for argv in commands}
    assert got == expected
    assert expected[" ".join(commands[3])] == (0, "5\n", "")
    assert [code for code, _out, _err in expected.values()] == [0, 0, 2, 0, 2, 2, 0, 0, 2, 2, 1]
    assert expected[" ".join(commands[9])][2] == (
        "halo: error: --rescan '99999999999999999999s': must be at most 24h\n"
    )
    ray = runner.run(code.argv(py39, ["ray-nodes"]))  # no Ray in that Python
    assert (ray.returncode, ray.stdout, ray.stderr) == (
        1,
        "",
        "halo: error: ray is not installed in this environment\n",
    )


# -- errors: one line, halo's exit codes ------------------------------------------------------


def one_line_error(result: tuple[int, str, str]) -> tuple[int, str, bool, bool]:
    code, out, err = result
    return code, out, err.startswith("halo: error: "), err.count("\n") == 1 and err.endswith("\n")


def test_an_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert one_line_error(run_main(["no-such-command"], capsys)) == (2, "", True, True)


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    cases = {
        "serve-health without --port": ["serve-health"],
        "a target without a port": ["net-probe", "ping", "nocolon"],
        "a size out of range": ["net-probe", "ping", "127.0.0.1:1", "--size", "0"],
        "setup --apply without --yes": ["setup", "--root", str(ROOTS / "strix-e810"), "--apply"],
        "an RDMA port that is not a number": ["counters", "--rdma", "rocep194s0:x"],
        "an RDMA port without its number": ["counters", "--rdma", "rocep194s0"],
    }
    got = {name: run_main(argv, capsys) for name, argv in cases.items()}
    assert got == {
        "serve-health without --port": (
            2,
            "",
            "halo: error: halo serve-health: the following arguments are required: --port\n",
        ),
        "a target without a port": (
            2,
            "",
            "halo: error: halo net-probe ping: argument target: 'nocolon': use ADDRESS:PORT\n",
        ),
        "a size out of range": (
            2,
            "",
            "halo: error: halo net-probe ping: argument --size: 0 is not in 1..1048576\n",
        ),
        "setup --apply without --yes": (
            2,
            "",
            "halo: error: setup --apply on a node needs --yes (the controller asks first)\n",
        ),
        "an RDMA port that is not a number": (
            2,
            "",
            "halo: error: halo counters: argument --rdma: 'rocep194s0:x': use DEVICE:PORT "
            "(PORT from 1 to 255)\n",
        ),
        "an RDMA port without its number": (
            2,
            "",
            "halo: error: halo counters: argument --rdma: 'rocep194s0': use DEVICE:PORT "
            "(PORT from 1 to 255)\n",
        ),
    }


def test_net_probe_ping_to_a_closed_port(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    assert run_main(["net-probe", "ping", f"127.0.0.1:{port}", "--seconds", "0.1"], capsys) == (
        1,
        "",
        f"halo: error: 127.0.0.1:{port}: [Errno 111] Connection refused\n",
    )


def test_serve_health_with_nothing_listening(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["serve-health", "--port", str(free_port())], capsys)
    assert (code, out, err.startswith("not healthy: "), err.count("\n")) == (1, "", True, 1)


@pytest.mark.parametrize(
    "argv", [["serve-probe", "--tokens", "2"], ["serve-tokens", "--tokens", "2", "--prompt=a"]]
)
def test_serve_requests_with_nothing_listening(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_main([*argv, "--port", str(free_port())], capsys)
    assert (code, out, err.startswith("request failed: "), err.count("\n")) == (1, "", True, 1)


def test_serve_tokens_without_a_prompt(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["serve-tokens", "--port", str(free_port()), "--tokens", "2"]
    assert run_main(argv, capsys) == (2, "", "serve-tokens: no --prompt\n")


# -- gguf-layers ------------------------------------------------------------------------------


def test_gguf_layers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = write_gguf(tmp_path / "model.gguf")
    text = tmp_path / "notes.gguf"
    text.write_text("this is a text file, long enough to hold a GGUF header of 24 bytes\n")
    zero = write_gguf(tmp_path / "zero.gguf", 0)
    got = {
        "model": run_main(["gguf-layers", str(model)], capsys),
        "text": run_main(["gguf-layers", str(text)], capsys),
        "zero": run_main(["gguf-layers", str(zero)], capsys),
        "missing": run_main(["gguf-layers", str(tmp_path / "nothing.gguf")], capsys),
        "directory": run_main(["gguf-layers", str(tmp_path)], capsys),
    }
    assert got == {
        "model": (0, "3\n", ""),
        "text": (
            2,
            "",
            f"halo: error: {text}: not a GGUF file (it starts with b'this', not b'GGUF')\n",
        ),
        "zero": (
            2,
            "",
            f"halo: error: {zero}: no block count in the GGUF header (architecture 'llama')\n",
        ),
        "missing": (
            2,
            "",
            f"halo: error: cannot read {tmp_path / 'nothing.gguf'}: No such file or directory\n",
        ),
        "directory": (2, "", f"halo: error: {tmp_path}: a directory, not a regular file\n"),
    }


# -- the installed CLI hands node commands over -------------------------------------------------


def test_the_cli_hands_node_commands_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (SRC / "halo_cluster" / "__main__.py").is_file()
    junk = tmp_path / "junk.gguf"
    junk.write_text("not GGUF, and more than twenty-four bytes long\n")
    commands = [["node-info"], ["gguf-layers", str(junk)], ["serve-health"]]
    got = {}
    for argv in commands:
        done = subprocess.run(
            [sys.executable, "-m", "halo_cluster", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)},
        )
        got[argv[0]] = (done.returncode, done.stdout, done.stderr)
    expected = {argv[0]: run_main(argv, capsys) for argv in commands}
    assert got == expected
    assert json.loads(got["node-info"][1])["halo"]
