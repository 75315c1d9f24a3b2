"""Monitoring in the lab: exporters inside the nodes, real iperf3 traffic, probes on both
paths, a cut link raising its alert, and a real Prometheus server scraping an exporter."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
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


def eventually(condition: Callable[[], bool], what: str, timeout_s: float = 20) -> None:
    """Poll ``condition`` until it holds: an observable state, never a guessed duration."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.1)


@pytest.fixture
def lab(tmp_path: Path, lab_host: None) -> Iterator[tuple[Path, dict]]:  # type: ignore[type-arg]
    require(shutil.which("iperf3") is not None, "iperf3 missing (Debian package iperf3)")
    up = halo("lab", "up", "--name", "mon", cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    status = json.loads(halo("lab", "status", "--name", "mon", "--json", cwd=tmp_path).stdout)
    # the lab's nodes are bare: each exporter is the unit 'halo monitoring exporter-unit'
    # installs (halo's node code); no systemd runs in a lab node, so its ExecStart is run here
    deployed = halo(
        "monitoring",
        "exporter-unit",
        "--config",
        status["config"],
        "--install",
        "--listen",
        "mgmt",
        "--interval",
        "250ms",
        "--json",
        cwd=tmp_path,
    )
    assert deployed.returncode == 0, deployed.stderr
    units = json.loads(deployed.stdout)["nodes"]
    status["exporter"] = units["node1"]["argv"][:4]  # env python3 CODE exporter
    procs = []
    for node in status["nodes"]:
        argv = [
            HALO,
            "lab",
            "exec",
            "--name",
            "mon",
            node["name"],
            "--",
            *units[node["name"]]["argv"],
        ]
        procs.append(
            subprocess.Popen(
                argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
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
    listening = ["lab", "exec", "--name", "mon", "node2", "--", "ss", "-Hltn", "sport = :5201"]
    eventually(lambda: halo(*listening, cwd=cwd).stdout.strip() != "", "iperf3 listening")
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
    sent = json.loads(client.stdout)["end"]["sum_sent"]["bytes"]
    # sampled once the exporter's counter holds (nearly) all of it
    eventually(lambda: metrics(exporter1)[tx_key] - before >= 0.9 * sent, "the transfer sampled")
    after = metrics(exporter1)[tx_key]
    assert abs((after - before) - sent) / sent < 0.10, (after - before, sent)
    # probe round trips to the other node on both paths
    for exporter, peer in ((exporter1, "node2"), (exporter2, "node1")):
        samples = metrics(exporter)
        for path in ("fabric", "mgmt"):
            labels = (("peer", peer), ("path", path), ("quantile", "0.5"))
            assert 0 < samples[("halo_probe_rtt_seconds", labels)] < 0.05
    # a pulled cable: node2's exporter raises link_down for its fabric interface
    assert halo("lab", "cut", "--name", "mon", "node2", cwd=cwd).returncode == 0
    link_down = ("halo_alert", (("alert", "link_down"), ("subject", "interface=enp194s0np0")))
    eventually(lambda: link_down in metrics(exporter2), "link_down raised")
    frame = halo("top", "--config", status["config"], "--once", "--interval", "300ms", cwd=cwd)
    assert "ALERT link_down: interface=enp194s0np0" in frame.stdout


def test_prometheus_scrapes_and_rate_query(tmp_path: Path, lab_host: None) -> None:
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
        deadline = time.monotonic() + 180  # a bound, not a guess: it ends once the rate shows
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


def test_interfaces_come_and_go_and_a_flood_of_partial_requests(
    lab: tuple[Path, dict],  # type: ignore[type-arg]
) -> None:
    """On a node's real sysfs: an interface that appears, vanishes, comes back, and is
    re-created between two samples has its series back each time, read afresh; then 2000
    connections from the host that send half a request and hang up stall no scrape for
    more than an interval, and the exporter's log stays free of tracebacks."""
    import socket
    import threading

    cwd, status = lab
    node1 = status["nodes"][0]
    address = f"{node1['mgmt_address']}:9879"
    run = shlex.join([*status["exporter"], "--listen", address, "--interval", "200ms"])
    run += " --rescan 300ms"
    exporter = subprocess.Popen(
        [
            HALO,
            "lab",
            "exec",
            "--name",
            "mon",
            "node1",
            "--",
            "bash",
            "-c",
            f"{run} 2>/tmp/exporter.log & echo $! >/tmp/exporter.pid; wait",
        ],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
    )

    def node1_sh(script: str) -> None:
        done = halo("lab", "exec", "--name", "mon", "node1", "--", "bash", "-c", script, cwd=cwd)
        assert done.returncode == 0, done.stderr

    # a bound on a hang, not a guess: each wait ends at the exporter's first sample showing it
    def until(condition, timeout_s: float = 60) -> dict:  # type: ignore[no-untyped-def,type-arg]
        deadline = time.monotonic() + timeout_s
        while True:
            samples = metrics(address)
            if condition(samples) or time.monotonic() > deadline:
                return samples
            time.sleep(0.1)

    try:
        wait_for(address)
        up = ("halo_net_up", (("interface", "veth7"),))
        mtu = ("halo_net_mtu_bytes", (("interface", "veth7"),))
        node1_sh("ip link add veth7 type veth peer name veth7p && ip link set veth7 mtu 1300 up")
        assert until(lambda s: up in s).get(mtu) == 1300
        node1_sh("ip link del veth7")
        assert up not in until(lambda s: up not in s)
        node1_sh("ip link add veth7 type veth peer name veth7p && ip link set veth7 mtu 1400")
        assert until(lambda s: s.get(mtu) == 1400).get(mtu) == 1400
        # a reset between two samples: the old files are dead, the new ones are read
        node1_sh(
            "ip link del veth7; ip link add veth7 type veth peer name veth7p; ip link set veth7 mtu 1500"
        )
        assert until(lambda s: s.get(mtu) == 1500).get(mtu) == 1500

        host, port = node1["mgmt_address"], 9879
        latencies: list[float] = []
        failures: list[str] = []
        stop = threading.Event()

        def scrape_loop() -> None:
            while not stop.is_set():
                start = time.monotonic()
                try:
                    metrics(address)
                    latencies.append(time.monotonic() - start)
                except OSError as err:
                    failures.append(repr(err))
                time.sleep(0.05)

        def flood(count: int) -> None:
            for _ in range(count):
                with socket.create_connection((host, port), timeout=5) as sock:
                    sock.sendall(b"GET /metr")

        scraper = threading.Thread(target=scrape_loop)
        scraper.start()
        floods = [threading.Thread(target=flood, args=(250,)) for _ in range(8)]
        for thread in floods:
            thread.start()
        for thread in floods:
            thread.join(120)
        scraped = len(latencies)  # it still answers after the flood: 3 more, 6 in all
        enough = max(scraped + 3, 6)
        eventually(lambda: len(latencies) >= enough or bool(failures), "scrapes after it")
        stop.set()
        scraper.join(10)
        assert failures == [] and len(latencies) > 5 and max(latencies) < 1.0, max(latencies)
        log = halo(
            "lab", "exec", "--name", "mon", "node1", "--", "cat", "/tmp/exporter.log", cwd=cwd
        )
        assert log.stdout.startswith("halo exporter on http://") and "Traceback" not in log.stdout
    finally:
        node1_sh("kill $(cat /tmp/exporter.pid)")
        exporter.wait(timeout=20)
