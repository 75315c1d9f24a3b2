"""One dashboard frame from two scrapes of every exporter (pure), and its plain-text form.

An exporter is not trusted: a label may be missing or hold escape codes, a value may be NaN
or +Inf. The frame takes what is there (an absent label is empty), and everything shown on
a terminal passes through ``printable``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from halo_cluster.monitor.snapshot import Key
from halo_cluster.printable import printable

Samples = Mapping[Key, float]


def _state(state: float) -> str:
    if state == 4:
        return "ACTIVE"
    return f"state {int(state)}" if math.isfinite(state) else f"state {state}"


def _rate(first: Samples, second: Samples, key: Key, interval_s: float) -> float:
    if key not in first or key not in second:
        return 0.0
    before, after = first[key], second[key]
    return (after - before if after >= before else after) / interval_s


def _by(samples: Samples, metric: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (name, labels), value in samples.items() if name == metric}


def node_frame(
    target: str, first: Samples | str, second: Samples | str, interval_s: float
) -> dict[str, Any]:
    if isinstance(second, str) or isinstance(first, str):
        return {"target": target, "error": second if isinstance(second, str) else first}
    ports = []
    for labels, state in sorted(_by(second, "halo_rdma_port_state").items()):
        tx = _rate(first, second, ("halo_rdma_port_transmit_bytes_total", labels), interval_s)
        rx = _rate(first, second, ("halo_rdma_port_receive_bytes_total", labels), interval_s)
        ports.append(
            {
                "device": "",
                "port": "",
                **dict(labels),
                "state": _state(state),
                "tx_gbps": tx * 8 / 1e9,
                "rx_gbps": rx * 8 / 1e9,
            }
        )
    interfaces = []
    for labels, up in sorted(_by(second, "halo_net_up").items()):

        def r(metric: str, labels: tuple[tuple[str, str], ...] = labels) -> float:
            return _rate(first, second, (metric, labels), interval_s)

        errors = sum(
            r(m)
            for m in (
                "halo_net_receive_errors_total",
                "halo_net_transmit_errors_total",
                "halo_net_receive_drop_total",
                "halo_net_transmit_drop_total",
            )
        )
        interfaces.append(
            {
                "interface": "",
                **dict(labels),
                "up": bool(up),
                "tx_gbps": r("halo_net_transmit_bytes_total") * 8 / 1e9,
                "rx_gbps": r("halo_net_receive_bytes_total") * 8 / 1e9,
                "tx_pps": r("halo_net_transmit_packets_total"),
                "rx_pps": r("halo_net_receive_packets_total"),
                "errors_per_s": errors,
            }
        )
    probes: dict[tuple[str, str], dict[str, Any]] = {}
    for (name, labels), value in second.items():
        if name == "halo_probe_rtt_seconds":
            d = dict(labels)
            try:
                percent = round(float(d.get("quantile", "")) * 100)
            except (ValueError, OverflowError):
                continue  # no quantile we could name
            peer, path = d.get("peer", ""), d.get("path", "")
            entry = probes.setdefault((peer, path), {"peer": peer, "path": path})
            entry[f"p{percent}_us"] = value * 1e6
    alerts = [dict(labels) for labels in _by(second, "halo_alert")]
    return {
        "target": target,
        "ports": ports,
        "interfaces": interfaces,
        "probes": [probes[k] for k in sorted(probes)],
        "alerts": alerts,
        "serving": serving(second),
    }


def serving(samples: Samples) -> list[dict[str, Any]]:
    """The supervised servers an exporter shows (the head's): state, restarts, last probe."""
    out = []
    for labels, value in sorted(_by(samples, "halo_serve_state").items()):
        if value != 1:
            continue
        cluster = dict(labels).get("cluster", "")
        own = (("cluster", cluster),)

        def get(metric: str, own: tuple[tuple[str, str], ...] = own) -> float | None:
            return samples.get((metric, own))

        up = get("halo_serve_supervisor_up")
        out.append(
            {
                "cluster": cluster,
                "state": dict(labels).get("state", ""),
                "restarts": get("halo_serve_restarts_total"),
                "probe_latency_s": get("halo_serve_probe_latency_seconds"),
                "supervisor_up": None if up is None else up == 1,
            }
        )
    return out


def build_frame(
    first: Mapping[str, Samples | str], second: Mapping[str, Samples | str], interval_s: float
) -> dict[str, Any]:
    return {
        "interval_s": interval_s,
        "nodes": [node_frame(t, first[t], second[t], interval_s) for t in second],
    }


def render_frame(frame: dict[str, Any]) -> str:
    out = []
    for node in frame["nodes"]:
        out.append(f"== {printable(node['target'])}")
        if "error" in node:
            out.append(f"   unreachable: {printable(node['error'])}")
            continue
        out += [_port_line(p) for p in node["ports"]]
        out += [_interface_line(i) for i in node["interfaces"]]
        for p in node["probes"]:
            p50, p99 = p.get("p50_us"), p.get("p99_us")
            shown = (
                "no answer"
                if p50 is None or p99 is None
                else f"p50 {p50:8.1f} µs  p99 {p99:8.1f} µs"
            )
            out.append(f"   probe {printable(p['peer']):<10} {printable(p['path']):<7} {shown}")
        out += [
            f"   ALERT {printable(a.get('alert'))}: {printable(a.get('subject'))}"
            for a in node["alerts"]
        ]
        out += [serving_line(s) for s in node.get("serving", [])]
    return "\n".join(out) + "\n"


def serving_line(s: dict[str, Any]) -> str:
    latency, restarts = s.get("probe_latency_s"), s.get("restarts")
    probe = "" if latency is None else f"  probe {latency * 1000:8.1f} ms"
    count = "" if restarts is None or not math.isfinite(restarts) else f"  restarts {restarts:.0f}"
    gone = "  SUPERVISOR DOWN" if s.get("supervisor_up") is False else ""
    return f"   serve {printable(s['cluster']):<16} {printable(s['state']):<10}{count}{probe}{gone}"


def _port_line(p: dict[str, Any]) -> str:
    where = printable(f"{p['device']}/{p['port']}")
    rates = f"tx {p['tx_gbps']:8.3f} Gb/s  rx {p['rx_gbps']:8.3f} Gb/s"
    return f"   rdma {where:<16} {p['state']:<8} {rates}"


def _interface_line(i: dict[str, Any]) -> str:
    state = "up" if i["up"] else "DOWN"
    rates = f"tx {i['tx_gbps']:8.3f} Gb/s  rx {i['rx_gbps']:8.3f} Gb/s"
    packets = f"{i['tx_pps']:9.0f}/{i['rx_pps']:9.0f} pkt/s  errors {i['errors_per_s']:.1f}/s"
    return f"   net  {printable(i['interface']):<16} {state:<8} {rates}  {packets}"
