"""The built-in TCP probe for real on loopback, and its command line."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from halo_cluster.node import net_probe as probe
from tests.conftest import free_port

HALO = str(Path(sys.executable).parent / "halo")


def test_ping_and_stream_on_loopback() -> None:
    port = free_port()
    server = threading.Thread(target=probe.serve, args=("127.0.0.1", port, 6.0), daemon=True)
    server.start()
    for _ in range(100):
        try:
            latency = probe.ping("127.0.0.1", port, 0.3, size=256)
            break
        except ConnectionRefusedError:
            threading.Event().wait(0.02)
    assert latency.tool == "builtin" and latency.size == 256
    assert latency.samples > 100
    assert 0 < latency.p50_us <= latency.p99_us < 100_000
    bandwidth = probe.stream("127.0.0.1", port, 0.3, streams=2)
    assert bandwidth.gbps > 0.05 and bandwidth.streams == 2


def test_quantile() -> None:
    values = [float(v) for v in range(101)]
    assert probe.quantile(values, 0.5) == 50.0
    assert probe.quantile(values, 0.99) == 99.0
    assert probe.quantile([3.0], 0.99) == 3.0


def test_cli_reports_an_unreachable_target_in_one_line() -> None:
    done = subprocess.run(
        [HALO, "net-probe", "ping", f"127.0.0.1:{free_port()}", "--seconds", "0.2"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1
    assert "Connection refused" in done.stderr and "Traceback" not in done.stderr
    bad = subprocess.run(
        [HALO, "net-probe", "ping", "nonsense"], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2 and "ADDRESS:PORT" in bad.stderr


@pytest.mark.parametrize("mode", ["ping", "stream"])
def test_cli_json(mode: str) -> None:
    port = free_port()
    server = subprocess.Popen(
        [HALO, "net-probe", "serve", "--bind", "127.0.0.1", "--port", str(port), "--limit", "8"]
    )
    try:
        for _ in range(50):
            done = subprocess.run(
                [HALO, "net-probe", mode, f"127.0.0.1:{port}", "--seconds", "0.3"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            if done.returncode == 0:
                break
        data = json.loads(done.stdout)
        assert data["tool"] == "builtin"
        assert ("p50_us" in data) if mode == "ping" else ("gbps" in data)
    finally:
        server.terminate()
        server.wait(10)
