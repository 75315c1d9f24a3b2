"""Prometheus text exposition: rendering our series, and parsing it back (for ``halo top``)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from halo_cluster.errors import ParseError
from halo_cluster.monitor.snapshot import Key, Labels

METRICS: dict[str, tuple[str, str]] = {
    "halo_rdma_port_state": ("gauge", "RDMA port state (4 = ACTIVE, 1 = DOWN)."),
    "halo_rdma_port_rate_bytes_per_second": ("gauge", "RDMA port link rate."),
    "halo_rdma_port_transmit_bytes_total": (
        "counter",
        "RDMA bytes sent (PMA data x4, or irdma IP octets).",
    ),
    "halo_rdma_port_receive_bytes_total": (
        "counter",
        "RDMA bytes received (PMA data x4, or irdma IP octets).",
    ),
    "halo_rdma_port_counter_total": ("counter", "RDMA port PMA counter (counters/)."),
    "halo_rdma_hw_counter_total": ("counter", "RDMA driver counter (hw_counters/)."),
    "halo_net_receive_bytes_total": ("counter", "Bytes received by the interface."),
    "halo_net_transmit_bytes_total": ("counter", "Bytes sent by the interface."),
    "halo_net_receive_packets_total": ("counter", "Packets received."),
    "halo_net_transmit_packets_total": ("counter", "Packets sent."),
    "halo_net_receive_errors_total": ("counter", "Receive errors."),
    "halo_net_transmit_errors_total": ("counter", "Transmit errors."),
    "halo_net_receive_drop_total": ("counter", "Received packets dropped."),
    "halo_net_transmit_drop_total": ("counter", "Sent packets dropped."),
    "halo_net_up": ("gauge", "0 when the interface's operstate is down, 1 otherwise."),
    "halo_net_mtu_bytes": ("gauge", "Interface MTU."),
    "halo_net_speed_bytes_per_second": ("gauge", "Interface link speed."),
    "halo_pcie_link_width": ("gauge", "Negotiated PCIe link width (lanes)."),
    "halo_gpu_gtt_used_bytes": ("gauge", "GPU GTT (system memory) in use."),
    "halo_gpu_vram_used_bytes": ("gauge", "GPU VRAM in use."),
    "halo_node_power_watts": (
        "gauge",
        "Power a source of the node reports (amdgpu hwmon power1_average, power1_input).",
    ),
    "halo_node_energy_joules_total": (
        "counter",
        "Energy a counter of the node has counted (RAPL energy_uj, amdgpu energy1_input), "
        "its wraps added up so it never goes down.",
    ),
    "halo_scrape_errors_total": (
        "counter",
        "Counter files that could not be read, devices that vanished, and energy counters "
        "that went down with no known range.",
    ),
    "halo_probe_rtt_seconds": ("summary", "TCP echo round trip to a peer, per path."),
    "halo_probe_failures_total": ("counter", "Probes that got no answer."),
    "halo_alert": ("gauge", "1 for every firing alert."),
    "halo_rdma_probe_latency_seconds": (
        "gauge",
        "Latest perftest ib_write_lat typical latency to a peer.",
    ),
    "halo_rdma_probe_failures_total": ("counter", "RDMA latency probes that failed."),
    "halo_serve_state": (
        "gauge",
        "1 for the supervised server's state (starting, serving, degraded, restarting, "
        "failed, stopped), 0 for the others.",
    ),
    "halo_serve_restarts_total": ("counter", "Restarts that brought the server back."),
    "halo_serve_probe_latency_seconds": (
        "gauge",
        "The supervisor's last one-token generation, end to end.",
    ),
    "halo_serve_probe_ok": ("gauge", "1 when the supervisor's last probe generated its token."),
    "halo_serve_supervisor_up": ("gauge", "1 while the supervisor's process runs."),
}


def _escape(value: str) -> str:
    """A label value as the exposition format wants it; other control characters (ANSI
    escapes from a node's device names among them) are shown as ``\\xNN`` text."""
    text = value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1].replace("\\", "\\\\") for ch in text)


_SERIES_NAMES: dict[tuple[str, Labels], str] = {}


def series_name(name: str, labels: Labels) -> str:
    """``name{labels}``, formatted once per series (the exporter renders every second)."""
    key = (name, labels)
    text = _SERIES_NAMES.get(key)
    if text is None:
        if len(_SERIES_NAMES) > 100_000:  # devices come and go: do not grow without bound
            _SERIES_NAMES.clear()
        text = _SERIES_NAMES[key] = name + format_labels(labels)
    return text


def format_labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


def render(
    series: Mapping[Key, float],
    extra: Iterable[tuple[str, Labels, float]] = (),
    dropped: list[str] | None = None,
) -> str:
    """All series grouped by metric, each group with its HELP and TYPE. A value that is no
    number at all is left out (its series and the reason appended to ``dropped``): one bad
    value never costs the page."""
    grouped: dict[str, list[tuple[str, Labels, float]]] = {}
    for (name, labels), value in series.items():
        grouped.setdefault(name, []).append((name, labels, value))
    for name, labels, value in extra:
        family = (
            re.sub(r"_(sum|count)$", "", name)
            if name.startswith("halo_probe_rtt_seconds")
            else name
        )
        grouped.setdefault(family, []).append((name, labels, value))
    lines = []
    for family in sorted(grouped):
        kind, text = METRICS.get(family, ("untyped", family))
        lines.append(f"# HELP {family} {text}")
        lines.append(f"# TYPE {family} {kind}")
        for name, labels, value in grouped[family]:
            try:
                number = format_number(value)
            except (TypeError, ValueError, OverflowError) as err:
                if dropped is not None:
                    dropped.append(f"{series_name(name, labels)}: {type(err).__name__}: {err}")
                continue
            lines.append(f"{series_name(name, labels)} {number}")
    return "\n".join(lines) + "\n"


def format_number(value: float) -> str:
    """A sample value as the exposition format writes it: integers exactly (below 2^53),
    other values as Python's shortest float text, and +Inf, -Inf and NaN as the format
    spells them (a 400-digit port rate in a node's file parses as +Inf). TypeError,
    ValueError or OverflowError (an int too large for a float) for what cannot be a sample."""
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if number == int(number) and abs(number) < 2**53:
        return str(int(number))
    return repr(number)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> dict[Key, float]:
    """Samples of a text exposition (comments skipped)."""
    out: dict[Key, float] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = _SAMPLE.match(line.strip())
        if not match:
            raise ParseError("not a Prometheus sample line", line)
        labels = tuple((k, _unescape(v)) for k, v in _LABEL.findall(match.group(3) or ""))
        try:
            out[(match.group(1), labels)] = float(match.group(4))
        except ValueError:
            raise ParseError("sample value is not a number", line) from None
    return out


_UNESCAPES = {"n": "\n", "\\": "\\", '"': '"'}


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: _UNESCAPES.get(m.group(1), m.group(0)), value)
