"""The exporter as a real process on 127.0.0.1: /metrics, probes, concurrency, top --once, Textual."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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


def test_textual_dashboard_with_pilot() -> None:
    from halo_cluster.monitor.tui import TopApp

    calls = {"n": 0}

    def scraper(target: str) -> dict[object, float]:
        calls["n"] += 1
        n = calls["n"]
        port = (("device", "rocep194s0"), ("port", "1"))
        return {
            ("halo_rdma_port_state", port): 4.0,
            ("halo_rdma_port_transmit_bytes_total", port): n * 1.25e9,
            ("halo_rdma_port_receive_bytes_total", port): 0.0,
            ("halo_net_up", (("interface", "enp194s0np0"),)): 1.0,
            ("halo_net_receive_errors_total", (("interface", "enp194s0np0"),)): float(n),
            ("halo_alert", (("alert", "errors_rising"), ("subject", "interface=enp194s0np0"))): 1.0,
        }

    async def drive() -> None:
        app = TopApp(["node1:9877"], 0.1, scraper)
        async with app.run_test() as pilot:
            await pilot.pause(0.35)
            links = app.query_one("#links")
            assert links.row_count == 2  # one RDMA port, one interface
            assert "100.000" in str(links.get_row_at(0))  # 1.25 GB per 0.1 s = 100 Gb/s
            await pilot.press("p")
            assert app.paused
            await pilot.press("s")
            await pilot.press("q")

    asyncio.run(drive())
