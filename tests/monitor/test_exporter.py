"""The exporter as a real process on 127.0.0.1: /metrics, probes, concurrency, top --once, Textual."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from halo_cluster.monitor.exposition import parse
from tests.conftest import ROOTS, free_port

HALO = str(Path(sys.executable).parent / "halo")


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


@pytest.fixture
def exporter(root_copy) -> Iterator[tuple[str, Path]]:
    root = root_copy("strix-e810")
    port, probe_port = free_port(), free_port()
    proc = subprocess.Popen(
        [
            HALO,
            "exporter",
            "--root",
            str(root),
            "--listen",
            f"127.0.0.1:{port}",
            "--interval",
            "200ms",
            "--probe",
            "127.0.0.1",
            "--probe-port",
            str(probe_port),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            get(url)
            break
        except OSError:
            time.sleep(0.05)
    try:
        yield f"127.0.0.1:{port}", root
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_metrics_probes_and_hot_unplug(exporter: tuple[str, Path]) -> None:
    target, root = exporter
    time.sleep(2.5)  # a dozen probe rounds
    samples = parse(get(f"http://{target}/metrics"))
    labels = (("peer", "127.0.0.1"), ("path", "extra"))
    assert samples[("halo_probe_rtt_seconds_count", labels)] >= 5
    assert 0 < samples[("halo_probe_rtt_seconds", (*labels, ("quantile", "0.5")))] < 0.05
    assert samples[("halo_rdma_port_state", (("device", "rocep194s0"), ("port", "1")))] == 4
    # the device disappears: its series go, the scrape still answers, the error is counted
    link = root / "sys/class/infiniband/rocep194s0"
    target_dir = link.resolve()
    link.unlink()
    import shutil

    shutil.rmtree(target_dir)
    time.sleep(0.6)
    after = parse(get(f"http://{target}/metrics"))
    assert not any(name.startswith("halo_rdma") for name, _ in after)
    assert after[("halo_scrape_errors_total", ())] >= 1


def test_fifty_concurrent_scrapers(exporter: tuple[str, Path]) -> None:
    target, _ = exporter
    deadline = time.monotonic() + 3

    def scrape_loop(_: int) -> int:
        errors = 0
        while time.monotonic() < deadline:
            try:
                assert "halo_rdma_port_state" in get(f"http://{target}/metrics")
            except Exception:
                errors += 1
        return errors

    with ThreadPoolExecutor(max_workers=50) as pool:
        assert sum(pool.map(scrape_loop, range(50))) == 0


def test_top_once(exporter: tuple[str, Path]) -> None:
    target, _ = exporter
    result = subprocess.run(
        [
            HALO,
            "top",
            "--targets",
            f"{target},127.0.0.1:1",
            "--once",
            "--interval",
            "300ms",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    frame = json.loads(result.stdout)
    live, dead = frame["nodes"]
    assert live["ports"][0]["device"] == "rocep194s0" and live["ports"][0]["state"] == "ACTIVE"
    assert live["probes"][0]["path"] == "extra" and live["probes"][0]["p50_us"] > 0
    assert "error" in dead
    text = subprocess.run(
        [HALO, "top", "--targets", target, "--once", "--interval", "200ms"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert "rdma rocep194s0/1" in text and "probe 127.0.0.1" in text


def test_exporter_once_and_listen_default() -> None:
    result = subprocess.run(
        [HALO, "exporter", "--root", str(ROOTS / "connectx-roce"), "--once"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    samples = parse(result.stdout)
    port = (("device", "mlx5_0"), ("port", "1"))
    assert samples[("halo_rdma_port_transmit_bytes_total", port)] == 1_000_000_000_000
    assert ("halo_rdma_port_counter_total", (*port, ("counter", "port_xmit_wait"))) in samples
    assert (
        "127.0.0.1:9877"
        in subprocess.run(
            [HALO, "exporter", "--help"], capture_output=True, text=True, check=True
        ).stdout
    )


def dashboard_samples(n: int) -> dict[object, float]:
    port = (("device", "rocep194s0"), ("port", "1"))
    return {
        ("halo_rdma_port_state", port): 4.0,
        ("halo_rdma_port_transmit_bytes_total", port): n * 1.25e9,
        ("halo_rdma_port_receive_bytes_total", port): 0.0,
        ("halo_net_up", (("interface", "enp194s0np0"),)): 1.0,
        ("halo_net_receive_errors_total", (("interface", "enp194s0np0"),)): float(n),
        ("halo_alert", (("alert", "errors_rising"), ("subject", "interface=enp194s0np0"))): 1.0,
    }


def table(app: object, selector: str) -> list[list[str]]:
    grid = app.query_one(selector)  # type: ignore[attr-defined]
    return [[cell.plain for cell in grid.get_row_at(i)] for i in range(grid.row_count)]


async def until(pilot: Any, condition: Callable[[], bool], seconds: float = 60.0) -> None:
    """Let the app run until ``condition`` holds (a loaded machine scrapes late: no fixed
    pause is long enough), or ``seconds`` pass; the caller's assert then shows the state."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        await pilot.pause(0.05)


def test_textual_dashboard_with_pilot() -> None:
    from halo_cluster.monitor.tui import TopApp

    calls = {"n": 0}

    def scraper(target: str) -> dict[object, float]:
        calls["n"] += 1
        return dashboard_samples(calls["n"])

    async def drive() -> None:
        # the clock: 0.1 s per scrape, so every rate is exact
        app = TopApp(["node1:9877"], 0.1, scraper, clock=lambda: calls["n"] * 0.1)
        expected = [
            ["node1:9877", "rocep194s0/1", "ACTIVE", "100.000", "0.000", "-", "-"],
            ["node1:9877", "enp194s0np0", "up", "0.000", "0.000", "0", "10.0"],
        ]  # 1.25 GB per 0.1 s = 100 Gb/s; one error per 0.1 s

        def shown() -> list[list[str]]:
            return [row[:5] + row[6:] for row in table(app, "#links")]

        async with app.run_test() as pilot:
            await until(pilot, lambda: shown() == expected)  # rates from the second scrape
            rows = table(app, "#links")
            assert shown() == expected
            assert set(rows[0][5]) == {"█"}
            await pilot.press("p")
            assert app.paused
            await pilot.press("s")
            await pilot.press("q")

    asyncio.run(drive())


def test_dashboard_stays_live_while_an_exporter_hangs() -> None:
    """One exporter does not answer for seconds: the others' rows update, keys work, and
    the slow one is named on screen."""
    import threading

    from halo_cluster.monitor.tui import TopApp

    release = threading.Event()
    calls = {"n": 0}

    def scraper(target: str) -> dict[object, float] | str:
        if target == "slow:9877":
            release.wait(20)
            return "slow:9877: timed out"
        calls["n"] += 1
        return dashboard_samples(calls["n"])

    async def drive() -> None:
        app = TopApp(["slow:9877", "fast:9877"], 0.1, scraper)
        async with app.run_test() as pilot:
            await until(pilot, lambda: len(table(app, "#links")) == 3)  # slow named, fast shown
            started = time.monotonic()
            await pilot.press("s")  # sort by throughput, and back
            await pilot.press("s")
            # far less than the 20 s the slow exporter hangs: the keys did not wait for it
            # (no tighter bound: a loaded CI machine takes its time)
            assert time.monotonic() - started < 10 and not app.sort_by_rate
            rows = table(app, "#links")
            assert rows[0] == ["slow:9877", "-", "slow to answer", "-", "-", "", "-", "-"]
            assert [row[:3] for row in rows[1:]] == [
                ["fast:9877", "rocep194s0/1", "ACTIVE"],
                ["fast:9877", "enp194s0np0", "up"],
            ]
            assert app.waiting() == ["slow:9877"]
            scrapes = calls["n"]
            await until(pilot, lambda: calls["n"] > scrapes)
            assert calls["n"] > scrapes  # the fast exporter is still scraped every interval
            release.set()
            await until(pilot, lambda: table(app, "#links")[0][2] == "unreachable")
            assert table(app, "#links")[0] == [
                "slow:9877",
                "-",
                "unreachable",
                "-",
                "-",
                "",
                "-",
                "-",
            ]
            await pilot.press("q")

    asyncio.run(drive())


def test_dashboard_shows_names_as_text() -> None:
    """Rich markup and control characters in what an exporter sends are shown, not obeyed."""
    from halo_cluster.monitor.tui import TopApp

    hostile = "[/x][link=http://evil]eth\x1b[31m0"
    calls = {"n": 0}

    def scraper(target: str) -> dict[object, float]:
        calls["n"] += 1
        labels = (("interface", hostile),)
        return {
            ("halo_net_up", labels): 1.0,
            ("halo_alert", (("alert", "link_down"), ("subject", f"interface={hostile}"))): 1.0,
        }

    async def drive() -> None:
        app = TopApp(["node1:9877"], 0.1, scraper)
        async with app.run_test() as pilot:
            await until(pilot, lambda: len(table(app, "#links")) > 0)
            assert table(app, "#links")[0][1] == "[/x][link=http://evil]eth\\x1b[31m0"
            alerts = app.query_one("#alerts").render()
            assert str(alerts) == (
                "ALERT node1:9877: link_down interface=[/x][link=http://evil]eth\\x1b[31m0"
            )
            await pilot.press("q")

    asyncio.run(drive())


# -- an exporter that lives as long as the node ---------------------------------------------
def start_exporter(
    root: Path, *extra: str, nofile: int | None = None
) -> tuple[subprocess.Popen[str], str]:
    """A real exporter process on 127.0.0.1 (with at most ``nofile`` descriptors)."""
    import resource

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    port = free_port()
    proc = subprocess.Popen(
        [HALO, "exporter", "--root", str(root), "--listen", f"127.0.0.1:{port}", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            get(f"http://127.0.0.1:{port}/metrics")
            return proc, f"127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"exporter did not start: {proc.communicate()[1]}") from None
            time.sleep(0.05)


def stop_exporter(proc: subprocess.Popen[str]) -> str:
    """Its log (stderr), after a clean stop."""
    proc.terminate()
    return proc.communicate(timeout=10)[1]


class Scraper:
    """Scrapes in a loop on a thread, keeping each scrape's latency and every failure."""

    def __init__(self, target: str) -> None:
        import threading

        self.url = f"http://{target}/metrics"
        self.latencies_s: list[float] = []
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        while not self.stop.is_set():
            start = time.monotonic()
            try:
                assert "halo_scrape_errors_total" in get(self.url)
                self.latencies_s.append(time.monotonic() - start)
            except Exception as err:
                self.failures.append(repr(err))
            time.sleep(0.05)

    def end(self) -> tuple[list[str], float, int]:
        self.stop.set()
        self.thread.join(10)
        return self.failures, max(self.latencies_s), len(self.latencies_s)


def test_a_flood_of_partial_requests_stalls_no_scrape(root_copy) -> None:
    """2000 connections that send half a request and hang up, then 300 that keep half a
    request open: normal scrapes keep answering within one interval (1 s), none fails, and
    the log has no traceback."""
    import socket
    import threading

    proc, target = start_exporter(root_copy("strix-e810"), "--interval", "1s")
    host, port = target.split(":")
    scraper = Scraper(target)

    def flood(count: int) -> None:
        for _ in range(count):
            sock = socket.create_connection((host, int(port)), timeout=5)
            sock.sendall(b"GET /metr")
            sock.close()

    threads = [threading.Thread(target=flood, args=(250,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    held = [socket.create_connection((host, int(port)), timeout=5) for _ in range(300)]
    for sock in held:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    time.sleep(1.5)
    failures, slowest_s, scrapes = scraper.end()
    for sock in held:
        sock.close()
    log = stop_exporter(proc)
    assert failures == [] and scrapes > 10
    assert slowest_s < 1.0, slowest_s
    assert "Traceback" not in log and "Error" not in log, log


def test_1024_descriptors_95_more_interfaces_and_400_idle_connections(root_copy) -> None:
    """The repro: 95 extra interfaces used to exhaust the default 1024 descriptors at start.
    Now every interface is exported, the process stays within its limit, and connections
    beyond its bound (256 here) make room instead of failing scrapes."""
    import socket

    from tests.monitor.test_sampler import add_interface

    root = root_copy("strix-e810")
    for i in range(95):
        add_interface(root, f"veth{i}", i)
    proc, target = start_exporter(root, "--interval", "500ms", nofile=1024)
    host, port = target.split(":")
    held = [socket.create_connection((host, int(port)), timeout=5) for _ in range(400)]
    for sock in held:
        sock.sendall(b"GET /")
    scraper = Scraper(target)
    time.sleep(1.5)
    failures, _slowest, scrapes = scraper.end()
    samples = parse(get(f"http://{target}/metrics"))
    fds = len(os.listdir(f"/proc/{proc.pid}/fd"))
    for sock in held:
        sock.close()
    log = stop_exporter(proc)
    assert failures == [] and scrapes > 5
    up = sorted(dict(k[1])["interface"] for k in samples if k[0] == "halo_net_up")
    assert up == sorted(["enp191s0", "enp194s0np0", "lo"] + [f"veth{i}" for i in range(95)])
    assert samples[("halo_net_receive_bytes_total", (("interface", "veth94"),))] == 94
    assert samples[("halo_scrape_errors_total", ())] == 0
    assert fds < 1024 - 64, fds
    assert "Traceback" not in log, log


def test_devices_come_back_in_the_exporter(root_copy, tmp_path: Path) -> None:
    import shutil

    root = root_copy("strix-e810")
    proc, target = start_exporter(root, "--interval", "100ms", "--rescan", "200ms")
    url = f"http://{target}/metrics"
    state = ("halo_rdma_port_state", (("device", "rocep194s0"), ("port", "1")))
    link = root / "sys/class/infiniband/rocep194s0"
    device, link_target = link.resolve(), os.readlink(link)
    shutil.copytree(device, tmp_path / "saved", symlinks=True)
    link.unlink()
    shutil.rmtree(device)

    def wait_for(condition: object) -> dict[object, float]:
        deadline = time.monotonic() + 10
        while True:
            samples = parse(get(url))
            if condition(samples) or time.monotonic() > deadline:  # type: ignore[operator]
                return samples
            time.sleep(0.1)

    gone = wait_for(lambda s: state not in s)
    shutil.copytree(tmp_path / "saved", device, symlinks=True)
    link.symlink_to(link_target)
    back = wait_for(lambda s: state in s)
    log = stop_exporter(proc)
    assert not any(name.startswith("halo_rdma") for name, _ in gone)
    assert back[state] == 4
    assert back[("halo_rdma_port_transmit_bytes_total", state[1])] == 918_273_645_120 + 2_048
    assert log.count("\n") == 1 and "Traceback" not in log  # only its start-up line


def test_listen_errors_are_one_line_with_exit_2() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = subprocess.run(
            [
                HALO,
                "exporter",
                "--root",
                str(ROOTS / "strix-e810"),
                "--listen",
                f"127.0.0.1:{port}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert (taken.returncode, taken.stderr) == (
            2,
            f"halo: error: cannot listen on 127.0.0.1:{port}: Address already in use\n",
        )
    for listen in ("no-such-host.invalid:9877", "127.0.0.1:70000", "9877"):
        bad = subprocess.run(
            [HALO, "exporter", "--root", str(ROOTS / "strix-e810"), "--listen", listen],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1, bad.stderr
        assert bad.stderr.startswith(("halo: error: cannot listen on", "halo: error: --listen"))
