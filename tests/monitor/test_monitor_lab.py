"""Monitoring in the lab: exporters inside the nodes, real iperf3 traffic, probes on both
paths, a cut link raising its alert, and a real Prometheus server scraping an exporter."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from halo_cluster.monitor.exposition import parse
from tests.conftest import HALO, ROOTS, free_port, halo, require

pytestmark = pytest.mark.lab


def metrics(address: str) -> dict:  # type: ignore[type-arg]
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        return parse(response.read().decode())


def wait_for(address: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            metrics(address)
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"exporter {address} did not answer")


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[Path, dict]]:  # type: ignore[type-arg]
    require(os.geteuid() == 0, "halo lab needs root")
    require(shutil.which("iperf3") is not None, "iperf3 missing (Debian package iperf3)")
    up = halo("lab", "up", "--name", "mon", cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    status = json.loads(halo("lab", "status", "--name", "mon", "--json", cwd=tmp_path).stdout)
    procs = []
    for node in status["nodes"]:
        procs.append(
            subprocess.Popen(
                [
                    HALO,
                    "lab",
                    "exec",
                    "--name",
                    "mon",
                    node["name"],
                    "--",
                    HALO,
                    "exporter",
                    "--config",
                    status["config"],
                    "--node",
                    node["name"],
                    "--listen",
                    f"{node['mgmt_address']}:9877",
                    "--interval",
                    "250ms",
                ],
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    try:
        for node in status["nodes"]:
            wait_for(f"{node['mgmt_address']}:9877")
        yield tmp_path, status
    finally:
        halo("lab", "down", "--name", "mon", cwd=tmp_path)
        for proc in procs:
            proc.wait(timeout=10)


def test_throughput_probes_and_link_down(lab: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    cwd, status = lab
    node1, node2 = status["nodes"]
    exporter1, exporter2 = f"{node1['mgmt_address']}:9877", f"{node2['mgmt_address']}:9877"
    tx_key = ("halo_net_transmit_bytes_total", (("interface", "enp194s0np0"),))
    server = subprocess.Popen(
        [
            HALO,
            "lab",
            "exec",
            "--name",
            "mon",
            "node2",
            "--",
            "iperf3",
            "-s",
            "-1",
            "-B",
            node2["fabric_address"],
        ],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    before = metrics(exporter1)[tx_key]
    client = halo(
        "lab",
        "exec",
        "--name",
        "mon",
        "node1",
        "--",
        "iperf3",
        "-c",
        node2["fabric_address"],
        "-t",
        "3",
        "-J",
        cwd=cwd,
    )
    server.wait(timeout=20)
    time.sleep(0.6)  # two sampling intervals
    after = metrics(exporter1)[tx_key]
    sent = json.loads(client.stdout)["end"]["sum_sent"]["bytes"]
    assert abs((after - before) - sent) / sent < 0.10, (after - before, sent)
    # probe round trips to the other node on both paths
    for exporter, peer in ((exporter1, "node2"), (exporter2, "node1")):
        samples = metrics(exporter)
        for path in ("fabric", "mgmt"):
            labels = (("peer", peer), ("path", path), ("quantile", "0.5"))
            assert 0 < samples[("halo_probe_rtt_seconds", labels)] < 0.05
    # a pulled cable: node2's exporter raises link_down for its fabric interface
    assert halo("lab", "cut", "--name", "mon", "node2", cwd=cwd).returncode == 0
    time.sleep(1.0)
    alerts = {k for k in metrics(exporter2) if k[0] == "halo_alert"}
    assert ("halo_alert", (("alert", "link_down"), ("subject", "interface=enp194s0np0"))) in alerts
    frame = halo("top", "--config", status["config"], "--once", "--interval", "300ms", cwd=cwd)
    assert "ALERT link_down: interface=enp194s0np0" in frame.stdout


def test_prometheus_scrapes_and_rate_query(tmp_path: Path) -> None:
    prometheus = shutil.which("prometheus")
    require(prometheus is not None, "prometheus missing (Debian package prometheus)")
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "strix-e810", root, symlinks=True)
    port, prom_port = free_port(), free_port()
    exporter = subprocess.Popen(
        [
            HALO,
            "exporter",
            "--root",
            str(root),
            "--listen",
            f"127.0.0.1:{port}",
            "--interval",
            "200ms",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: halo\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )
    server = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    counter = root / "sys/class/infiniband/rocep194s0/ports/1/hw_counters/ip4OutOctets"
    try:
        start = int(counter.read_text())
        query = urllib.parse.quote(
            'rate(halo_rdma_port_transmit_bytes_total{device="rocep194s0"}[5s])'
        )
        deadline = time.monotonic() + 40
        result: list = []  # type: ignore[type-arg]
        step = 0
        while time.monotonic() < deadline:
            step += 1
            counter.write_text(f"{start + step * 5_000_000}\n")  # ~10 MB/s while we wait
            time.sleep(0.5)
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{prom_port}/api/v1/query?query={query}", timeout=5
                ) as response:
                    result = json.load(response)["data"]["result"]
            except OSError:
                continue
            if result and float(result[0]["value"][1]) > 0:
                break
        assert result, "Prometheus returned no series for the rate() query"
        assert result[0]["metric"]["port"] == "1"
        assert 2e6 < float(result[0]["value"][1]) < 5e7
    finally:
        server.terminate()
        exporter.terminate()
        server.wait(timeout=20)
        exporter.wait(timeout=10)
