"""Sampler and rates on fixture roots whose counter files the test rewrites between samples."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.monitor.alerts import evaluate_alerts
from halo_cluster.monitor.exposition import parse, render
from halo_cluster.monitor.rates import rates
from halo_cluster.monitor.sampler import Sampler, Snapshot

HW = "sys/class/infiniband/rocep194s0/ports/1/hw_counters"
PORT = (("device", "rocep194s0"), ("port", "1"))
TX = ("halo_rdma_port_transmit_bytes_total", PORT)


@pytest.fixture
def strix(root_copy) -> Path:
    return root_copy("strix-e810")


def write(root: Path, rel: str, value: int | str) -> None:
    (root / rel).write_text(f"{value}\n")


def test_normalised_bytes_and_rates(strix: Path) -> None:
    sampler = Sampler(str(strix))
    first = sampler.sample()
    assert first.values[TX] == 918_273_645_120 + 2_048
    write(strix, f"{HW}/ip4OutOctets", 918_273_645_120 + 1_000_000)
    write(strix, f"{HW}/RetransSegs", 999_999_999)
    time.sleep(0.01)
    second = sampler.sample()
    got = rates(first, second)
    elapsed = second.time_s - first.time_s
    assert got[TX] == pytest.approx(1_000_000 / elapsed)
    assert got[("halo_rdma_hw_counter_total", (*PORT, ("counter", "RetransSegs")))] > 0
    assert first.values[("halo_rdma_port_state", PORT)] == 4
    sampler.close()


def test_counter_reset_is_never_negative(strix: Path) -> None:
    sampler = Sampler(str(strix))
    first = sampler.sample()
    write(strix, f"{HW}/ip4OutOctets", 500)
    write(strix, f"{HW}/ip6OutOctets", 0)
    second = sampler.sample()
    assert rates(first, second)[TX] == pytest.approx(500 / (second.time_s - first.time_s))
    sampler.close()


def test_vanished_device_drops_its_series_and_counts_an_error(strix: Path) -> None:
    sampler = Sampler(str(strix))
    before = sampler.sample()
    assert TX in before.values
    target = (strix / "sys/class/infiniband/rocep194s0").resolve()
    (strix / "sys/class/infiniband/rocep194s0").unlink()
    shutil.rmtree(target)
    after = sampler.sample()
    assert TX not in after.values and not any(k[0].startswith("halo_rdma") for k in after.values)
    assert after.vanished == ("sys/class/infiniband/rocep194s0",)
    assert after.values[("halo_scrape_errors_total", ())] == 1
    assert ("halo_net_mtu_bytes", (("interface", "enp194s0np0"),)) in after.values  # the rest stays
    sampler.close()


def test_garbage_counter_is_an_error_not_a_crash(strix: Path) -> None:
    sampler = Sampler(str(strix))
    write(strix, f"{HW}/cnpSent", "garbage")
    snapshot = sampler.sample()
    assert snapshot.errors == 1
    assert ("halo_rdma_hw_counter_total", (*PORT, ("counter", "cnpSent"))) not in snapshot.values
    sampler.close()


@given(
    st.lists(st.integers(0, 2**64 - 1), min_size=2, max_size=2),
    st.floats(0.001, 100),
)
def test_rates_never_negative(values: list[int], elapsed: float) -> None:
    a = Snapshot(0.0, {TX: float(values[0])})
    b = Snapshot(elapsed, {TX: float(values[1])})
    assert rates(a, b)[TX] >= 0


def test_exposition_round_trip() -> None:
    series = {
        TX: 12345.0,
        ("halo_net_up", (("interface", 'we"ird\\na\nme'),)): 1.0,
        ("halo_scrape_errors_total", ()): 0.0,
    }
    text = render(
        series,
        [
            (
                "halo_probe_rtt_seconds",
                (("peer", "node2"), ("path", "fabric"), ("quantile", "0.5")),
                4.2e-5,
            )
        ],
    )
    assert "# TYPE halo_rdma_port_transmit_bytes_total counter" in text
    assert "# TYPE halo_probe_rtt_seconds summary" in text
    parsed = parse(text)
    assert (
        parsed[TX] == 12345.0 and parsed[("halo_net_up", (("interface", 'we"ird\\na\nme'),))] == 1.0
    )


def test_alerts() -> None:
    values = {
        ("halo_rdma_port_state", PORT): 1.0,
        ("halo_net_up", (("interface", "enp194s0np0"),)): 0.0,
        ("halo_net_up", (("interface", "lo"),)): 0.0,
    }
    got = evaluate_alerts(
        values,
        {
            ("halo_rdma_hw_counter_total", (*PORT, ("counter", "RetransSegs"))): 3.0,
            ("halo_rdma_hw_counter_total", (*PORT, ("counter", "ip4OutOctets"))): 9e9,
            ("halo_net_receive_errors_total", (("interface", "enp194s0np0"),)): 1.0,
        },
        {("node2", "fabric"): 120e-6, ("node2", "mgmt"): 50e-6},
        {("node2", "fabric"): 40e-6, ("node2", "mgmt"): 40e-6},
    )
    assert sorted((a.name, a.subject) for a in got) == [
        ("errors_rising", "device=rocep194s0,port=1,counter=RetransSegs"),
        ("errors_rising", "interface=enp194s0np0"),
        ("latency_high", "peer=node2,path=fabric"),
        ("link_down", "device=rocep194s0,port=1"),
        ("link_down", "interface=enp194s0np0"),
    ]


def test_baseline_from_the_latest_bench_net_result(tmp_path: Path) -> None:
    import json
    import os

    from halo_cluster.errors import UsageError
    from halo_cluster.monitor.baseline import latest_result, load_baseline

    old, new = tmp_path / "a.json", tmp_path / "b.json"
    for path, p50, stamp in ((old, 90.0, 1_000), (new, 42.0, 2_000)):
        path.write_text(
            json.dumps(
                {
                    "schema": "halo.bench.net/1",
                    "paths": [
                        {"peer": "node2", "path": "fabric", "latency_us": {"p50": p50, "p99": 80.0}}
                    ],
                }
            )
        )
        os.utime(path, (stamp, stamp))
    (tmp_path / "other.json").write_text('{"schema": "halo.bench.collective/1"}')
    (tmp_path / "broken.json").write_text("{")
    assert latest_result(tmp_path) == new
    assert load_baseline(new) == {("node2", "fabric"): pytest.approx(42e-6)}
    with pytest.raises(UsageError, match="not a bench net result"):
        load_baseline(tmp_path / "other.json")
    assert latest_result(tmp_path / "missing") is None
