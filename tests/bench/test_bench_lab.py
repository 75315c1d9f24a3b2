"""The benchmarks for real in the lab: bench net with real sockperf / qperf / iperf3 and the
built-in probe on both paths; bench collective and bench tp with real Gloo across two nodes
on Ray; a node cut mid-run; the HTML report opened in real headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from halo_cluster.bench.net import PATH_PROBE_S
from tests.conftest import HALO, halo, require

pytestmark = pytest.mark.lab


def leftovers(cwd: Path, name: str, node: str) -> str:
    return halo(
        "lab",
        "exec",
        "--name",
        name,
        node,
        "--",
        "pgrep",
        "-fa",
        "sockperf|qperf|iperf3|net-probe|bench-driver|ray::Worker",
        cwd=cwd,
    ).stdout


@pytest.fixture(scope="module")
def shared_lab(
    tmp_path_factory: pytest.TempPathFactory, lab_host: None
) -> Iterator[tuple[str, str]]:
    """One 2-node lab for the file: each test leaves it as it found it (healed, Ray down,
    nothing of its tools left), which ``lab`` proves after every test."""
    home = tmp_path_factory.mktemp("bench-lab")
    name = f"b{os.getpid() % 10000}"
    up = halo("lab", "up", "--name", name, "--nodes", "2", cwd=home)
    assert up.returncode == 0, up.stderr
    try:
        yield name, str(home / ".halo-lab" / name / "halo.toml")
    finally:
        halo("down", "--config", str(home / ".halo-lab" / name / "halo.toml"), cwd=home)
        down = halo("lab", "down", "--name", name, cwd=home)
        assert down.returncode == 0, down.stderr


@pytest.fixture
def lab(tmp_path: Path, shared_lab: tuple[str, str]) -> Iterator[tuple[Path, str, str]]:
    """The shared lab with this test's own directory (its results, its report), restored
    after it: Ray stopped, node2 healed, and shown to be the lab it was."""
    name, config = shared_lab
    yield tmp_path, name, config
    halo("down", "--config", config, cwd=tmp_path)
    halo("lab", "heal", "--name", name, "node2", cwd=tmp_path)
    status = json.loads(halo("lab", "status", "--name", name, "--json", cwd=tmp_path).stdout)
    assert [n["sshd"] for n in status["nodes"]] == [True, True], status
    fabric2 = status["nodes"][1]["fabric_address"]
    ping = halo("lab", "exec", "--name", name, "node1", "--", "ping", "-c", "1", "-W", "5", fabric2)
    assert ping.returncode == 0, "the shared lab's fabric is not back: " + ping.stderr
    assert not any(leftovers(tmp_path, name, node) for node in ("node1", "node2"))


def test_bench_net_with_the_peer_tools_and_the_builtin_probe(lab: tuple[Path, str, str]) -> None:
    cwd, name, config = lab
    for tool in ("sockperf", "iperf3", "qperf"):
        require(shutil.which(tool) is not None, f"{tool} is not installed")
    env = {"XDG_DATA_HOME": str(cwd / "data")}
    runs = {
        "auto": ("sockperf", "iperf3"),
        "qperf": ("qperf", "qperf"),
        "builtin": ("builtin", "builtin"),
    }
    for choice, (lat_tool, bw_tool) in runs.items():
        args = ["--latency-tool", choice, "--bandwidth-tool", choice] if choice != "auto" else []
        done = halo(
            "bench", "net", "--config", config, "--seconds", "1", "--json", *args, cwd=cwd, env=env
        )
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["schema"] == "halo.bench.net/1"
        one, two = result["nodes"]["node1"], result["nodes"]["node2"]
        assert [(p["path"], p["from"], p["to"]) for p in result["paths"]] == [
            ("mgmt", one["mgmt_address"], two["mgmt_address"]),
            ("fabric", one["fabric_address"], two["fabric_address"]),
        ]
        assert one["mgmt_address"].startswith("198.18.")
        assert one["fabric_address"].startswith("198.19.")
        for path in result["paths"]:
            assert path["errors"] == []
            assert path["latency_us"]["tool"] == lat_tool and path["bandwidth_tool"] == bw_tool
            assert 1 < path["latency_us"]["p50"] < 5000
            assert 0.05 < path["bandwidth_gbps"] < 1000
        assert result["skipped"] == [
            {"pair": "node1,node2", "path": "rdma", "reason": "node1's plan is ethernet, not RDMA"}
        ]
        assert result["nodes"]["node2"]["mtu"] == 9000
        assert Path(result["saved"]).is_file()
    for node in ("node1", "node2"):
        assert leftovers(cwd, name, node) == ""
    listed = json.loads(halo("results", "list", "--json", cwd=cwd, env=env).stdout)
    assert [r["kind"] for r in listed] == ["net", "net", "net"]


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Rows of an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                best = min(
                    (abs(p - left), 0, left), (abs(p - up), 1, up), (abs(p - corner), 2, corner)
                )
                line[i] = (line[i] + best[2]) & 255
        rows.append(bytes(line))
        previous = line
    return width, channels, rows


def test_collective_tp_cut_and_report_in_chromium(lab: tuple[Path, str, str]) -> None:
    cwd, name, config = lab
    require(shutil.which("ray", path=str(Path(HALO).parent)) is not None, "ray is not installed")
    pytest.importorskip("torch")
    env = {"XDG_DATA_HOME": str(cwd / "data")}
    assert halo("up", "--config", config, cwd=cwd).returncode == 0

    done = halo(
        "bench",
        "collective",
        "--config",
        config,
        "--sizes",
        "8B:64KiB",
        "--iters",
        "20",
        "--json",
        cwd=cwd,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    coll = json.loads(done.stdout)
    assert coll["schema"] == "halo.bench.collective/1" and coll["backend"] == "gloo"
    assert coll["world_size"] == 2 and [r["rank"] for r in coll["ranks"]] == [0, 1]
    assert [r["node"] for r in coll["ranks"]] == ["node1", "node2"]
    assert [r["hostname"] for r in coll["ranks"]] == ["node1", "node2"]
    # each rank ran with its own node's plan, set in its raylet's environment by halo up
    assert all(r["env"]["GLOO_SOCKET_IFNAME"] == "enp194s0np0" for r in coll["ranks"])
    assert coll["ranks"][1]["env"]["VLLM_HOST_IP"] == coll["nodes"]["node2"]["fabric_address"]
    assert coll["transport"]["transport"] == "socket"
    assert [r["bytes"] for r in coll["sweep"]] == [8 << i for i in range(14)]
    assert all(r["time_us"] > 0 and r["busbw_gbs"] == r["algbw_gbs"] for r in coll["sweep"])
    assert coll["versions"]["torch"] and coll["versions"]["ray"]

    done = halo(
        "bench",
        "tp",
        "llama-3.1-8b",
        "--config",
        config,
        "--batch",
        "1,8",
        "--steps",
        "3",
        "--json",
        cwd=cwd,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    tp = json.loads(done.stdout)
    assert [
        (r["batch"], r["allreduces_per_token"], r["bytes_per_allreduce"]) for r in tp["rows"]
    ] == [
        (1, 66, 8192),
        (8, 66, 65536),
    ]
    assert all(r["network_ms_per_token"] > 0 for r in tp["rows"])

    # the fabric of node2 is cut mid-run, once both ranks said their init is done (the
    # all-reduces start then): a clear error naming it, within the timeout
    code, err, took = act_when(
        ["bench", "collective", "--config", config, "--sizes", "8KiB", "--iters", "100000",
         "--timeout", "10"],
        cwd,
        env,
        "both ranks' init done",
        lambda said: all(f"rank {r} on node{r + 1}: init done" in said for r in (0, 1)),
        lambda _proc: halo("lab", "cut", "--name", name, "node2", cwd=cwd),
    )  # fmt: skip
    assert code == 1
    assert "node2" in err and "does not answer on the fabric" in err, err
    assert "Traceback" not in err
    assert took < 10 + 20  # its timeout, plus SSH and the checks
    assert halo("lab", "heal", "--name", name, "node2", cwd=cwd).returncode == 0
    for node in ("node1", "node2"):
        assert "bench-driver" not in leftovers(cwd, name, node)

    report = cwd / "report.html"
    made = halo("report", coll["saved"], tp["saved"], "-o", str(report), cwd=cwd, env=env)
    assert made.returncode == 0, made.stderr
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    require(chromium is not None, "chromium is not installed")
    assert chromium is not None
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={cwd / 'chromium'}",
    ]
    dom = subprocess.run(
        [chromium, *flags, "--dump-dom", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout
    for chart in ("allreduce-time", "allreduce-busbw", "tp-per-token"):
        assert f'data-chart="{chart}"' in dom
    shot = cwd / "report.png"
    subprocess.run(
        [chromium, *flags, f"--screenshot={shot}", "--window-size=800,1200", report.as_uri()],
        capture_output=True,
        timeout=120,
        check=False,
    )
    width, channels, rows = png_pixels(shot)
    assert width == 800
    inked = sum(
        1
        for row in rows
        for i in range(0, len(row), channels * 4)
        if row[i : i + 3] != b"\xff\xff\xff"
    )
    assert inked > 0.02 * len(rows) * width / 4  # not a blank page
    # the chart colours are on the page (lines and bars drawn, not only text)
    blue = bytes.fromhex("2b6cb0")
    assert any(blue in row[i : i + 3] for row in rows for i in range(0, len(row), channels))


def act_when(
    args: list[str],
    cwd: Path,
    env: dict[str, str],
    ready: str,
    check: Callable[[str], bool],
    act: Callable[[subprocess.Popen[str]], object],
) -> tuple[int, str, float]:
    """Start halo in its own session, ``act`` on it once ``check(what it printed on stderr so
    far)`` is true (an observable state, never a fixed wait), and return (exit code, stderr,
    seconds from the act to its end)."""
    proc = subprocess.Popen(
        [HALO, *args],
        cwd=cwd,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    said: list[str] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)

    assert proc.stdout is not None
    readers = [
        threading.Thread(target=read_stderr, daemon=True),
        threading.Thread(target=proc.stdout.read, daemon=True),
    ]
    for reader in readers:
        reader.start()
    until(
        lambda: check("".join(said)), ready, 120, lambda: proc.poll() is None, lambda: "".join(said)
    )
    acted = time.monotonic()
    act(proc)
    proc.wait(timeout=120)
    for reader in readers:
        reader.join(10)
    return proc.returncode, "".join(said), time.monotonic() - acted


def until(
    condition: Callable[[], bool],
    what: str,
    timeout_s: float = 30,
    alive: Callable[[], bool] = lambda: True,
    said: Callable[[], str] = lambda: "",
) -> None:
    """Poll ``condition`` until it holds (at most ``timeout_s``; ``alive`` false ends it);
    a failure carries the end of what the command said (``said``)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert alive(), f"ended before {what}; it said: {said()[-1500:]}"
        assert time.monotonic() < deadline, f"never {what}; it said: {said()[-1500:]}"
        time.sleep(0.3)


def interrupt_when(
    args: list[str],
    cwd: Path,
    env: dict[str, str],
    ready: str,
    check: Callable[[str], bool],
) -> tuple[int, str]:
    """Ctrl-C (SIGINT to the whole group, as a terminal does) once ``check()`` is true."""
    import signal

    code, err, _took = act_when(
        args, cwd, env, ready, check, lambda proc: os.killpg(proc.pid, signal.SIGINT)
    )
    return code, err


def test_ctrl_c_stops_every_remote_tool(lab: tuple[Path, str, str]) -> None:
    cwd, name, config = lab
    require(shutil.which("iperf3") is not None, "iperf3 is not installed")
    env = {"XDG_DATA_HOME": str(cwd / "data")}
    code, err = interrupt_when(
        ["bench", "net", "--config", config, "--seconds", "30", "--path", "fabric"],
        cwd,
        env,
        "a server running on node2",
        lambda _said: leftovers(cwd, name, "node2") != "",
    )
    assert code == 130, err
    assert "interrupted; remote tools stopped" in err and "Traceback" not in err
    until(
        lambda: not any(leftovers(cwd, name, node) for node in ("node1", "node2")),
        "every remote tool gone",
    )

    require(shutil.which("ray", path=str(Path(HALO).parent)) is not None, "ray is not installed")
    pytest.importorskip("torch")
    assert halo("up", "--config", config, cwd=cwd).returncode == 0
    code, err = interrupt_when(
        ["bench", "collective", "--config", config, "--sizes", "8KiB", "--iters", "100000"],
        cwd,
        env,
        "ranks running",
        lambda _said: "ray::Worker" in leftovers(cwd, name, "node2"),
    )
    assert code == 130, err
    assert "interrupted" in err and "Traceback" not in err
    until(
        lambda: not any(leftovers(cwd, name, node) for node in ("node1", "node2")),
        "no tool, driver or rank left",
    )


def test_bench_net_cut_mid_run_names_the_path(lab: tuple[Path, str, str]) -> None:
    cwd, name, config = lab
    require(shutil.which("iperf3") is not None, "iperf3 is not installed")
    env = {"XDG_DATA_HOME": str(cwd / "data")}
    latency = ("sockperf", "qperf", "net-probe")  # the first leg: cut while it runs
    # 10 s legs: the cut (seen, then made) lands in the latency leg, or on a loaded machine
    # in the next one
    code, err, took = act_when(
        ["bench", "net", "--config", config, "--path", "fabric", "--seconds", "10"],
        cwd,
        env,
        "the latency tool running on node2",
        lambda _said: any(tool in leftovers(cwd, name, "node2") for tool in latency),
        lambda _proc: halo("lab", "cut", "--name", name, "node2", cwd=cwd),
    )
    assert code == 1
    assert "fabric path" in err and "(node1 → node2) stopped answering" in err
    assert "partial result kept in" in err and "Traceback" not in err
    # bounded by the tools' limits: a cut seen late on a loaded machine lets the latency leg
    # end and fails the bandwidth leg, which a probe over the path then asks again
    assert took < 2 * 10 * 3 + PATH_PROBE_S + 30  # two legs' limits, the probe, SSH, checks
    saved = json.loads(next((cwd / "data" / "halo" / "results").glob("net-*.json")).read_text())
    assert saved["incomplete"].startswith("fabric path")
    assert "stopped answering" in saved["paths"][0]["errors"][-1]  # kept, with its error
    assert halo("lab", "heal", "--name", name, "node2", cwd=cwd).returncode == 0
    for node in ("node1", "node2"):
        assert leftovers(cwd, name, node) == ""
