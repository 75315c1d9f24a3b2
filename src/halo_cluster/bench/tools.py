"""Benchmark tools: argv builders and pure parsers of their output (perftest, sockperf,
qperf, iperf3). Results are normalised: latency in µs (one way, as perftest and sockperf
ping-pong report it), bandwidth in Gb/s."""

from __future__ import annotations

import re
from typing import Any

from halo_cluster.bounded.jsonin import loads
from halo_cluster.errors import ParseError
from halo_cluster.perftest import (
    Bandwidth,
    Latency,
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NUMBER = r"(\d+(?:\.\d+)?)"


# -- sockperf --------------------------------------------------------------------------------
def sockperf_server_argv(address: str, port: int) -> list[str]:
    return ["sockperf", "server", "--tcp", "-i", address, "-p", str(port)]


def sockperf_client_argv(address: str, port: int, seconds: float, size: int = 64) -> list[str]:
    return [
        "sockperf",
        "ping-pong",
        "--tcp",
        "-i",
        address,
        "-p",
        str(port),
        "-t",
        f"{seconds:g}",
        "-m",
        str(size),
    ]


def parse_sockperf(text: str) -> Latency:
    """``sockperf ping-pong`` reports half the round trip (one way)."""
    clean = _ANSI.sub("", text)
    avg = re.search(rf"avg-latency={_NUMBER}", clean)
    p50 = re.search(rf"percentile 50\.000 =\s*{_NUMBER}", clean)
    p99 = re.search(rf"percentile 99\.000 =\s*{_NUMBER}", clean)
    count = re.search(r"Total (\d+) observations", clean)
    if not (avg and p50):
        raise ParseError("no sockperf latency summary (avg-latency, percentile 50)", clean[-400:])
    return Latency(
        float(p50.group(1)),
        float(p99.group(1)) if p99 else None,
        float(avg.group(1)),
        int(count.group(1)) if count else None,
        "sockperf",
    )


# -- qperf -----------------------------------------------------------------------------------
_QPERF_UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "sec": 1e6}
_QPERF_BW = {
    "bytes/sec": 8e-9,
    "KB/sec": 8e-6,
    "MB/sec": 8e-3,
    "GB/sec": 8.0,
    "Kb/sec": 1e-6,
    "Mb/sec": 1e-3,
    "Gb/sec": 1.0,
}


def qperf_argv(address: str, port: int, seconds: float, *tests: str) -> list[str]:
    return ["qperf", "--listen_port", str(port), "-t", f"{seconds:g}", address, *tests]


def parse_qperf(text: str) -> dict[str, dict[str, Any]]:
    """``test:`` blocks of ``name = value unit`` lines -> {test: {name: (value, unit)}}."""
    tests: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        if re.match(r"^\w+:\s*$", line):
            current = tests.setdefault(line.strip()[:-1], {})
            continue
        match = re.match(r"^\s+(\w+)\s*=\s*([\d,.]+)\s*(\S*)", line)
        if match and current is not None:
            current[match.group(1)] = (float(match.group(2).replace(",", "")), match.group(3))
        elif line.strip() and current is None:
            raise ParseError("qperf output before any 'test:' line", text[:400])
    if not tests:
        raise ParseError("no qperf results", text[:400])
    return tests


def qperf_latency(text: str) -> Latency:
    tests = parse_qperf(text)
    value, unit = tests.get("tcp_lat", {}).get("latency", (None, None))
    if value is None or unit not in _QPERF_UNITS:
        raise ParseError("no tcp_lat latency in qperf output", text[:400])
    return Latency(value * _QPERF_UNITS[unit], None, value * _QPERF_UNITS[unit], None, "qperf")


def qperf_bandwidth(text: str) -> Bandwidth:
    tests = parse_qperf(text)
    value, unit = tests.get("tcp_bw", {}).get("bw", (None, None))
    if value is None or unit not in _QPERF_BW:
        raise ParseError("no tcp_bw bw in qperf output", text[:400])
    return Bandwidth(value * _QPERF_BW[unit], None, "qperf")


# -- iperf3 ----------------------------------------------------------------------------------
def iperf3_server_argv(address: str, port: int) -> list[str]:
    return ["iperf3", "-s", "-1", "-B", address, "-p", str(port)]


def iperf3_client_argv(address: str, port: int, seconds: float, streams: int = 4) -> list[str]:
    return [
        "iperf3",
        "-c",
        address,
        "-p",
        str(port),
        "-t",
        f"{seconds:g}",
        "-P",
        str(streams),
        "-J",
    ]


def parse_iperf3(text: str) -> Bandwidth:
    """Goodput is what the receiver got (``end.sum_received``)."""
    try:
        data = loads(text)
    except ValueError:
        raise ParseError("iperf3 output is not JSON (was -J given?)", text[:400]) from None
    if not isinstance(data, dict):
        raise ParseError("iperf3 JSON is not an object", text[:400])
    if data.get("error"):
        raise ParseError(f"iperf3 failed: {data['error']}", text[:400])
    try:
        end = data["end"]
        bps = float(end["sum_received"]["bits_per_second"])
        retransmits = end.get("sum_sent", {}).get("retransmits")
    except (KeyError, TypeError, ValueError):
        raise ParseError("iperf3 JSON without end.sum_received", text[:400]) from None
    return Bandwidth(bps / 1e9, int(retransmits) if retransmits is not None else None, "iperf3")


# -- halo's built-in probe (``halo net-probe``, JSON on stdout) -------------------------------
def _builtin(text: str, key: str) -> dict[str, Any]:
    try:
        data = loads(text)
    except ValueError:
        raise ParseError("built-in probe output is not JSON", text[-400:]) from None
    if not isinstance(data, dict) or not isinstance(data.get(key), (int, float)):
        raise ParseError(f"built-in probe output without {key}", text[-400:])
    return data


def parse_builtin_latency(text: str) -> Latency:
    data = _builtin(text, "p50_us")
    p99, avg, samples = data.get("p99_us"), data.get("avg_us"), data.get("samples")
    return Latency(
        float(data["p50_us"]),
        float(p99) if isinstance(p99, (int, float)) else None,
        float(avg) if isinstance(avg, (int, float)) else None,
        int(samples) if isinstance(samples, int) else None,
        "builtin",
    )


def parse_builtin_bandwidth(text: str) -> Bandwidth:
    return Bandwidth(float(_builtin(text, "gbps")["gbps"]), None, "builtin")
