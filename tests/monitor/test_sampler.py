"""Sampler and rates on fixture roots whose counter files the test rewrites between samples."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.monitor.alerts import evaluate_alerts
from halo_cluster.monitor.exposition import parse, render
from halo_cluster.monitor.rates import rates
from halo_cluster.monitor.sampler import Sampler
from halo_cluster.monitor.snapshot import Snapshot

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


# -- an exporter that lives as long as the node ---------------------------------------------
NET_STAT_NAMES = (
    "rx_bytes",
    "tx_bytes",
    "rx_packets",
    "tx_packets",
    "rx_errors",
    "tx_errors",
    "rx_dropped",
    "tx_dropped",
)


def add_interface(root: Path, name: str, value: int, ifindex: int = 100) -> None:
    """A virtual interface as sysfs shows it: its directory and the class link to it."""
    base = root / "sys/devices/virtual/net" / name
    (base / "statistics").mkdir(parents=True)
    for stat in NET_STAT_NAMES:
        (base / "statistics" / stat).write_text(f"{value}\n")
    (base / "mtu").write_text("1500\n")
    (base / "operstate").write_text("up\n")
    (base / "type").write_text("1\n")
    (base / "ifindex").write_text(f"{ifindex}\n")
    (root / "sys/class/net" / name).symlink_to(f"../../devices/virtual/net/{name}")


def interface_series(
    name: str, value: float
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    labels = (("interface", name),)
    series = {(metric, labels): value for metric in NET_METRIC_NAMES}
    series[("halo_net_up", labels)] = 1.0
    series[("halo_net_mtu_bytes", labels)] = 1500.0
    return series


NET_METRIC_NAMES = (
    "halo_net_receive_bytes_total",
    "halo_net_transmit_bytes_total",
    "halo_net_receive_packets_total",
    "halo_net_transmit_packets_total",
    "halo_net_receive_errors_total",
    "halo_net_transmit_errors_total",
    "halo_net_receive_drop_total",
    "halo_net_transmit_drop_total",
)


def rdma_series(snapshot: Snapshot) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {k: v for k, v in snapshot.values.items() if k[0].startswith("halo_rdma")}


def test_descriptors_stay_within_the_budget(strix: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """95 more interfaces (950 more counter files) than the node had: at most the budget is
    kept open, the rest is opened and closed per sample, and the values are the same."""
    from halo_cluster.monitor import sampler as sampler_module

    for i in range(95):
        add_interface(strix, f"veth{i}", i)
    bounded = Sampler(str(strix), fd_budget=100)
    unbounded = Sampler(str(strix), fd_budget=100_000)
    assert (bounded.open_files(), len(bounded.sources)) == (100, 1_022)
    assert unbounded.open_files() == 1_022
    got, want = bounded.sample().values, unbounded.sample().values
    assert got == want
    for i in (0, 94):
        assert {k: v for k, v in got.items() if k[1] == (("interface", f"veth{i}"),)} == (
            interface_series(f"veth{i}", float(i))
        )
    bounded.close()
    unbounded.close()
    assert bounded.open_files() == unbounded.open_files() == 0
    monkeypatch.setattr(sampler_module.resource, "getrlimit", lambda _which: (1024, 1024))
    assert sampler_module.default_fd_budget() == 448  # half of 1024, less 64 for sockets


def test_devices_that_vanish_and_come_back_are_discovered_again(
    strix: Path, tmp_path: Path
) -> None:
    sampler = Sampler(str(strix), rescan_s=0.0)  # look again at every sample
    before = sampler.sample()
    link = strix / "sys/class/infiniband/rocep194s0"
    device = link.resolve()
    saved = tmp_path / "saved-device"
    shutil.copytree(device, saved, symlinks=True)
    target = os.readlink(link)
    link.unlink()  # a driver reload: the device goes...
    shutil.rmtree(device)
    gone = sampler.sample()
    assert rdma_series(gone) == {} and gone.vanished == ("sys/class/infiniband/rocep194s0",)
    shutil.copytree(saved, device, symlinks=True)  # ...and comes back
    link.symlink_to(target)
    back = sampler.sample()
    assert rdma_series(back) == rdma_series(before)
    assert back.vanished == () and back.errors == 0
    # a new interface appears, with its series
    add_interface(strix, "veth7", 7)
    added = sampler.sample()
    assert {k: v for k, v in added.values.items() if k[1] == (("interface", "veth7"),)} == (
        interface_series("veth7", 7.0)
    )
    # an interface re-created between two samples (new ifindex) is read afresh
    veth = strix / "sys/devices/virtual/net/veth7"
    shutil.rmtree(veth)
    (strix / "sys/class/net/veth7").unlink()
    add_interface(strix, "veth7", 3, ifindex=101)
    again = sampler.sample()
    assert {k: v for k, v in again.values.items() if k[1] == (("interface", "veth7"),)} == (
        interface_series("veth7", 3.0)
    )
    # nothing changed: the cheap look finds it, and nothing is discovered again
    count = sampler.discoveries
    sampler.sample()
    assert sampler.discoveries == count
    sampler.close()


def test_byte_totals_agree_with_inventory_on_a_port_with_both_families(root_copy) -> None:
    """A ConnectX port has PMA data counters *and* irdma-style octet counters: the PMA's
    words x 4 win, in inventory and exporter alike (never their sum)."""
    from halo_cluster.facts.inventory import collect_inventory

    root = root_copy("connectx-roce")
    port_dir = root / "sys/class/infiniband/mlx5_0/ports/1"
    for name, value in (
        ("ip4OutOctets", 111),
        ("ip6OutOctets", 222),
        ("ip4InOctets", 333),
        ("ip6InOctets", 444),
    ):
        write(root, f"{port_dir.relative_to(root)}/hw_counters/{name}", value)
    labels = (("device", "mlx5_0"), ("port", "1"))

    def both() -> tuple[tuple[int | None, int | None], dict[str, float]]:
        port = collect_inventory(str(root)).rdma[0].ports[0]
        sampler = Sampler(str(root))
        values = sampler.sample().values
        sampler.close()
        totals = {
            name: values[(name, labels)]
            for name in (
                "halo_rdma_port_transmit_bytes_total",
                "halo_rdma_port_receive_bytes_total",
            )
            if (name, labels) in values
        }
        return (port.xmit_bytes, port.rcv_bytes), totals

    assert both() == (
        (1_000_000_000_000, 960_000_000_000),
        {
            "halo_rdma_port_transmit_bytes_total": 1_000_000_000_000.0,
            "halo_rdma_port_receive_bytes_total": 960_000_000_000.0,
        },
    )
    # a PMA that answers N/A leaves that total unknown in both, not the octets in its place
    (port_dir / "counters" / "port_xmit_data").write_text("N/A\n")
    assert both() == (
        (None, 960_000_000_000),
        {"halo_rdma_port_receive_bytes_total": 960_000_000_000.0},
    )


def test_a_fifo_or_symlink_in_place_of_a_counter_is_an_error_not_a_hang(strix: Path) -> None:
    sampler = Sampler(str(strix), fd_budget=0)  # every file opened for each read
    counter = strix / HW / "cnpSent"
    counter.unlink()
    os.mkfifo(counter)
    fifo = sampler.sample()
    assert fifo.errors == 1
    assert ("halo_rdma_hw_counter_total", (*PORT, ("counter", "cnpSent"))) not in fifo.values
    counter.unlink()
    counter.symlink_to("/dev/zero")
    linked = sampler.sample()
    assert linked.errors == 1
    assert ("halo_rdma_hw_counter_total", (*PORT, ("counter", "cnpSent"))) not in linked.values
    write(strix, f"{HW}/RetransSegs", 2**64)  # past a 64-bit counter: garbage
    assert sampler.sample().errors == 2
    sampler.close()


# -- issue 29 ---------------------------------------------------------------------------------
def test_huge_and_non_finite_values_never_cost_the_page() -> None:
    """#6: a value no int() takes (+Inf from a 400-digit port rate, NaN) is written as the
    format spells it; one that is no float at all is left out, its reason given."""
    rate = ("halo_rdma_port_rate_bytes_per_second", PORT)
    dropped: list[str] = []
    text = render(
        {rate: float("1" * 400), ("halo_net_mtu_bytes", (("interface", "a"),)): -float("inf")},
        [
            ("halo_alert", (("alert", "x"), ("subject", "nan")), float("nan")),
            ("halo_alert", (("alert", "y"), ("subject", "big")), 10**400),  # type: ignore[list-item]
            ("halo_alert", (("alert", "z"), ("subject", "ok")), 2.0**53),
        ],
        dropped,
    )
    assert text.splitlines() == [
        "# HELP halo_alert 1 for every firing alert.",
        "# TYPE halo_alert gauge",
        'halo_alert{alert="x",subject="nan"} NaN',
        'halo_alert{alert="z",subject="ok"} 9007199254740992.0',
        "# HELP halo_net_mtu_bytes Interface MTU.",
        "# TYPE halo_net_mtu_bytes gauge",
        'halo_net_mtu_bytes{interface="a"} -Inf',
        "# HELP halo_rdma_port_rate_bytes_per_second RDMA port link rate.",
        "# TYPE halo_rdma_port_rate_bytes_per_second gauge",
        'halo_rdma_port_rate_bytes_per_second{device="rocep194s0",port="1"} +Inf',
    ]
    assert dropped == [
        'halo_alert{alert="y",subject="big"}: OverflowError: int too large to convert to float'
    ]
    parsed = parse(text)
    assert (
        parsed[rate] == float("inf")
        and parsed[("halo_alert", (("alert", "x"), ("subject", "nan")))] != 0
    )


def test_a_file_replaced_by_rename_is_read_anew(strix: Path) -> None:
    """A kept-open counter file keeps the file it opened: replaced by rename, or deleted and
    written anew, the next sample reads the new file (twice in quick succession too: a
    directory changed moments ago is looked at again)."""
    sampler = Sampler(str(strix))
    key = ("halo_rdma_hw_counter_total", (*PORT, ("counter", "RetransSegs")))
    assert sampler.open_files() == len(sampler.sources) and key in sampler.sample().values
    path = strix / HW / "RetransSegs"
    for value in (111, 222):
        (strix / HW / "new").write_text(f"{value}\n")
        os.replace(strix / HW / "new", path)
        assert sampler.sample().values[key] == value
    path.unlink()
    path.write_text("333\n")
    assert sampler.sample().values[key] == 333
    assert sampler.scrape_errors == 0 and sampler.open_files() == len(sampler.sources)
