"""Tool output parsers on recorded outputs (real loopback captures for sockperf, qperf and
iperf3; perftest in its documented formats) and on arbitrary text."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.bench import tools as t
from halo_cluster.errors import ParseError
from halo_cluster.perftest import (
    Bandwidth,
    Latency,
    parse_perftest_bw,
    parse_perftest_json,
    parse_perftest_lat,
    perftest_argv,
)
from tests.conftest import OUTPUTS

TOOLS = OUTPUTS / "tools"


def read(name: str) -> str:
    return (TOOLS / name).read_text()


def test_perftest_latency_table() -> None:
    assert parse_perftest_lat(read("perftest-write-lat-roce.txt")) == Latency(
        5.23, 6.02, 5.27, 1000, "perftest"
    )


@pytest.mark.parametrize(
    ("name", "gbps"),
    [
        ("perftest-write-bw-mb.txt", 11540.12 * 2**20 * 8 / 1e9),  # old header, MiB numbers
        ("perftest-write-bw-mib.txt", 11540.12 * 2**20 * 8 / 1e9),
        ("perftest-write-bw-gbits.txt", 50.64),
    ],
)
def test_perftest_bandwidth_units(name: str, gbps: float) -> None:
    assert parse_perftest_bw(read(name)).gbps == pytest.approx(gbps)


def test_perftest_json_reports() -> None:
    assert parse_perftest_json(read("perftest-write-bw.json")) == Bandwidth(50.64, None, "perftest")
    assert parse_perftest_json(read("perftest-write-lat.json")) == Latency(
        5.23, 6.02, 5.27, 1000, "perftest"
    )


def test_sockperf_real_capture() -> None:
    assert t.parse_sockperf(read("sockperf-pingpong.txt")) == Latency(
        33.519, 49.668, 34.245, 8030, "sockperf"
    )


def test_qperf_real_capture() -> None:
    assert t.qperf_latency(read("qperf.txt")) == Latency(30.8, None, 30.8, None, "qperf")
    assert t.qperf_bandwidth(read("qperf.txt")).gbps == pytest.approx(1.79 * 8)
    verbose = t.parse_qperf(read("qperf-verbose.txt"))
    assert verbose["tcp_lat"]["latency"] == (29.3, "us") and verbose["tcp_lat"][
        "loc_send_msgs"
    ] == (17081.0, "")


def test_iperf3_real_capture() -> None:
    result = t.parse_iperf3(read("iperf3-loopback.json"))
    assert result.tool == "iperf3" and result.retransmits == 0 and 1 < result.gbps < 200


def test_iperf3_error_is_named() -> None:
    with pytest.raises(ParseError, match="iperf3 failed: unable to connect to server"):
        t.parse_iperf3('{"start": {}, "error": "unable to connect to server: Connection refused"}')


def test_argv_builders() -> None:
    assert perftest_argv(
        "ib_write_bw",
        "rocep194s0",
        1,
        "198.19.0.12",
        ib_port=2,
        size=65536,
        iterations=5000,
        port=18515,
    ) == [
        "ib_write_bw",
        "-d",
        "rocep194s0",
        "-F",
        "-s",
        "65536",
        "-n",
        "5000",
        "-p",
        "18515",
        "-i",
        "2",
        "-x",
        "1",
        "--report_gbits",
        "198.19.0.12",
    ]
    assert t.iperf3_client_argv("198.19.0.12", 5201, 5)[-3:] == ["-P", "4", "-J"]
    assert t.sockperf_client_argv("198.19.0.12", 11111, 2)[:2] == ["sockperf", "ping-pong"]
    assert t.qperf_argv("198.19.0.12", 19765, 2, "tcp_lat", "tcp_bw")[-2:] == ["tcp_lat", "tcp_bw"]


PARSERS: list[Callable[[str], Any]] = [
    parse_perftest_lat,
    parse_perftest_bw,
    parse_perftest_json,
    t.parse_sockperf,
    t.parse_qperf,
    t.qperf_latency,
    t.qperf_bandwidth,
    t.parse_iperf3,
]


@pytest.mark.parametrize("parser", PARSERS, ids=lambda f: f.__name__)
@given(text=st.text(max_size=300))
def test_any_text_parses_or_raises_parse_error(parser: Callable[[str], Any], text: str) -> None:
    with contextlib.suppress(ParseError):
        parser(text)


@pytest.mark.parametrize(
    "name", ["perftest-write-lat-roce.txt", "sockperf-pingpong.txt", "qperf.txt"]
)
@given(cut=st.integers(0, 2000))
def test_truncated_outputs_never_crash(name: str, cut: int) -> None:
    text = read(name)[:cut]
    for parser in PARSERS:
        with contextlib.suppress(ParseError):
            parser(text)


def test_outputs_captured_in_the_lab() -> None:
    """sockperf, qperf and iperf3 run between two lab nodes over the veth fabric (MTU 9000)."""
    lat = t.parse_sockperf(read("lab-sockperf-pingpong.txt"))
    assert (lat.typical_us, lat.avg_us, lat.samples, lat.tool) == (40.55, 41.411, 18700, "sockperf")
    assert lat.p99_us == 62.212
    assert t.qperf_latency(read("lab-qperf.txt")) == Latency(38.3, None, 38.3, None, "qperf")
    assert t.qperf_bandwidth(read("lab-qperf.txt")).gbps == pytest.approx(1.87 * 8)
    assert t.parse_iperf3(read("lab-iperf3.json")) == Bandwidth(
        15882037108.66252 / 1e9, 7, "iperf3"
    )
