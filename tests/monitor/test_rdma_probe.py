"""The optional RDMA latency probe, through the fake runner (no RDMA hardware here)."""

from __future__ import annotations

from halo_cluster.monitor.exporter import Exporter
from halo_cluster.monitor.exposition import parse
from halo_cluster.monitor.rdma_probe import RdmaProber, RdmaTarget
from halo_cluster.monitor.sampler import Sampler
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.result import Result
from tests.conftest import OUTPUTS, ROOTS


def test_rdma_probe_reports_latency_and_failures() -> None:
    recorded = (OUTPUTS / "tools" / "perftest-write-lat-roce.txt").read_text()
    runner = (
        FakeRunner()
        .on(
            [
                "ib_write_lat",
                "-d",
                "rocep194s0",
                "-F",
                "-s",
                "2",
                "-n",
                "1000",
                "-p",
                "18515",
                "-x",
                "1",
                "192.168.100.2",
            ],
            Result((), 0, recorded, ""),
        )
        .on(["ib_write_lat"], Result((), 1, "", "Couldn't connect to 192.168.100.3:18515"))
    )
    prober = RdmaProber(
        runner,
        "rocep194s0",
        1,
        [RdmaTarget("strix2", "192.168.100.2"), RdmaTarget("strix3", "192.168.100.3")],
        300.0,
    )
    prober.probe_once()
    exporter = Exporter(Sampler(str(ROOTS / "strix-e810")), [], 1.0)
    exporter.rdma = prober
    samples = parse(exporter.metrics())
    assert samples[("halo_rdma_probe_latency_seconds", (("peer", "strix2"),))] == 5.23e-6
    assert samples[("halo_rdma_probe_failures_total", (("peer", "strix3"),))] == 1
    assert ("halo_rdma_probe_latency_seconds", (("peer", "strix3"),)) not in samples
    exporter.sampler.close()
