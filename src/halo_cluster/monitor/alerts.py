"""Alerts as a pure function of the latest snapshot, the rates since the previous one and
the probe latencies: link down, error/retransmit counters rising, latency above twice its
baseline."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from halo_cluster.monitor.snapshot import Key

# Counter names that only move when something is wrong on the wire.
BAD_COUNTER = re.compile(
    r"(error|errors|discard|drop|retrans|RetransSegs|out_of_sequence|seq_err|timeout|RTO|Nak|cnp|CNP|"
    r"symbol_error|link_downed|ECNMrkd|rnr)",
)


def watched(key: Key) -> bool:
    """Counters whose rise is an alert (the exporter computes rates for these only)."""
    metric, labels = key
    counter = dict(labels).get("counter", metric)
    return (
        "errors" in metric or "drop" in metric or bool(BAD_COUNTER.search(counter))
    ) and "bytes" not in metric


@dataclass(frozen=True)
class Alert:
    name: str  # link_down / errors_rising / latency_high
    subject: str
    detail: str


def evaluate_alerts(
    values: Mapping[Key, float],
    rates: Mapping[Key, float],
    latency_p50_s: Mapping[tuple[str, str], float | None],
    baseline_s: Mapping[tuple[str, str], float],
) -> list[Alert]:
    alerts = []
    for (metric, labels), value in values.items():
        if metric == "halo_rdma_port_state" and value != 4:
            alerts.append(Alert("link_down", _subject(labels), f"RDMA port state {int(value)}"))
        if metric == "halo_net_up" and value == 0 and dict(labels).get("interface") != "lo":
            alerts.append(Alert("link_down", _subject(labels), "interface not up"))
    for (metric, labels), rate in rates.items():
        if rate <= 0:
            continue
        counter = dict(labels).get("counter", metric)
        if (
            "errors" in metric or "drop" in metric or BAD_COUNTER.search(counter)
        ) and "bytes" not in metric:
            alerts.append(Alert("errors_rising", _subject(labels), f"{counter} +{rate:.3g}/s"))
    for target, p50 in latency_p50_s.items():
        base = baseline_s.get(target)
        if p50 is not None and base and p50 > 2 * base:
            alerts.append(
                Alert(
                    "latency_high",
                    f"peer={target[0]},path={target[1]}",
                    f"p50 {p50 * 1e6:.0f} µs > 2 × baseline {base * 1e6:.0f} µs",
                )
            )
    return alerts


def _subject(labels: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels)


def serving_rules(probe_slow_s: float) -> str:
    """Prometheus alert rules on the supervised server's series (``monitor/serving.py``),
    as YAML: the server down (not serving, or its supervisor gone), a crash loop (the state
    'failed', or three restarts within 15 minutes), and the one-token probe slow."""
    rules = (
        (
            "HaloServerDown",
            'max by (cluster) (halo_serve_state{state!="serving"}) == 1 '
            "or max by (cluster) (halo_serve_supervisor_up) == 0",
            "1m",
            "critical",
            "{{ $labels.cluster }}: the server is not serving (or its supervisor is gone)",
        ),
        (
            "HaloCrashLoop",
            'max by (cluster) (halo_serve_state{state="failed"}) == 1 '
            "or increase(halo_serve_restarts_total[15m]) >= 3",
            "0m",
            "critical",
            "{{ $labels.cluster }}: a crash loop; see 'halo status' and 'halo logs --supervisor'",
        ),
        (
            "HaloProbeSlow",
            f"halo_serve_probe_latency_seconds > {probe_slow_s:g}",
            "2m",
            "warning",
            "{{ $labels.cluster }}: one generated token takes {{ $value }} s",
        ),
    )
    lines = ["# halo serving alerts (halo monitoring prometheus-config --rules)", "groups:"]
    lines += ["  - name: halo-serving", "    rules:"]
    for name, expr, wait, severity, summary in rules:
        lines += [
            f"      - alert: {name}",
            f"        expr: {json.dumps(expr)}",
            f"        for: {wait}",
            f"        labels: {{severity: {severity}}}",
            f"        annotations: {{summary: {json.dumps(summary)}}}",
        ]
    return "\n".join(lines) + "\n"
