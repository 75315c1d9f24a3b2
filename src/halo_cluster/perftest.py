"""perftest (``ib_write_lat``/``ib_write_bw``): argv builders and pure parsers of its output,
and the two result shapes every benchmark tool is normalised to (latency in µs, one way;
bandwidth in Gb/s).

A bottom-layer module because two layers use it: ``bench net`` and the exporter's RDMA
prober (``monitor/rdma_probe.py``), which must not import the bench package.
"""

from __future__ import annotations

from dataclasses import dataclass

from halo_cluster.bounded.jsonin import loads
from halo_cluster.errors import ParseError


@dataclass(frozen=True)
class Latency:
    typical_us: float  # p50 (perftest t_typical, sockperf percentile 50, qperf mean)
    p99_us: float | None
    avg_us: float | None
    samples: int | None
    tool: str


@dataclass(frozen=True)
class Bandwidth:
    gbps: float
    retransmits: int | None
    tool: str


# -- perftest --------------------------------------------------------------------------------
def perftest_argv(
    tool: str,
    device: str,
    gid_index: int | None,
    server: str | None,
    *,
    ib_port: int | None,
    size: int,
    iterations: int,
    port: int,
    report_gbits: bool = True,
) -> list[str]:
    """``ib_write_lat`` / ``ib_write_bw`` on ``-d device -i ib_port -x gid_index``; server side
    when ``server`` is None. ``port`` is the TCP port the two sides meet on."""
    argv = [tool, "-d", device, "-F", "-s", str(size), "-n", str(iterations), "-p", str(port)]
    if ib_port is not None:
        argv += ["-i", str(ib_port)]
    if gid_index is not None:
        argv += ["-x", str(gid_index)]
    if report_gbits and tool.endswith("_bw"):
        argv.append("--report_gbits")
    if server is not None:
        argv.append(server)
    return argv


def _table_rows(text: str, header_start: str) -> tuple[str, list[list[str]]]:
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.strip().startswith(header_start):
            rows = []
            for row in lines[index + 1 :]:
                cols = row.split()
                if not cols or not cols[0].isdigit():
                    break
                rows.append(cols)
            return line, rows
    raise ParseError(f"no '{header_start}' results table", text[-400:])


def parse_perftest_lat(text: str) -> Latency:
    _header, rows = _table_rows(text, "#bytes #iterations")
    if not rows or len(rows[-1]) < 7:
        raise ParseError("latency table without a full result row", text[-400:])
    cols = rows[-1]
    try:
        values = [float(c) for c in cols[:9]]
    except ValueError:
        raise ParseError("non-numeric latency result", text[-400:]) from None
    p99 = values[7] if len(values) > 7 else None
    return Latency(
        typical_us=values[4], p99_us=p99, avg_us=values[5], samples=int(values[1]), tool="perftest"
    )


def parse_perftest_bw(text: str) -> Bandwidth:
    header, rows = _table_rows(text, "#bytes")
    if not rows or len(rows[-1]) < 4:
        raise ParseError("bandwidth table without a result row", text[-400:])
    try:
        average = float(rows[-1][3])
    except ValueError:
        raise ParseError("non-numeric bandwidth result", text[-400:]) from None
    return Bandwidth(_to_gbps(average, header), None, "perftest")


def _to_gbps(value: float, header: str) -> float:
    """perftest < 24.07 printed [MB/sec] for what later versions call [MiB/sec]: same numbers."""
    if "[Gb/sec]" in header:
        return value
    if "[MB/sec]" in header or "[MiB/sec]" in header:
        return value * 2**20 * 8 / 1e9
    raise ParseError("unknown bandwidth unit in perftest header", header)


def parse_perftest_json(text: str) -> Latency | Bandwidth:
    """The ``--out_json`` file; the test name says latency or bandwidth. BW values are in
    the report's unit: Gb/s when run with ``--report_gbits`` (as halo does), else MiB/s."""
    try:
        data = loads(text)
        test = data["test_info"]["test"]
        results = data["results"]
    except (ValueError, KeyError, TypeError):
        raise ParseError("not a perftest JSON report", text[:400]) from None
    try:
        if "Latency" in test:
            return Latency(
                float(results["t_typical"]),
                float(results["percentile_99"]),
                float(results["t_avg"]),
                int(results["n_iterations"]),
                "perftest",
            )
        return Bandwidth(float(results["BW_average"]), None, "perftest")
    except (KeyError, TypeError, ValueError):
        raise ParseError("perftest JSON report without its results", text[:400]) from None
