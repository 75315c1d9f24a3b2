"""One dashboard frame from two scrapes of every exporter (pure), and its plain-text form.

An exporter is not trusted: a label may be missing or hold escape codes, a value may be NaN
or +Inf. The frame takes what is there (an absent label is empty), and everything shown on
a terminal passes through ``printable``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from halo_cluster.jsonout import JsonObject
from halo_cluster.monitor.snapshot import Key
from halo_cluster.printable import printable

Samples = Mapping[Key, float]
Labels = tuple[tuple[str, str], ...]  # an exporter's labels, as it sent them


def _state(state: float) -> str:
    if state == 4:
        return "ACTIVE"
    return f"state {int(state)}" if math.isfinite(state) else f"state {state}"


def _rate(first: Samples, second: Samples, key: Key, interval_s: float) -> float:
    if key not in first or key not in second:
        return 0.0
    before, after = first[key], second[key]
    return (after - before if after >= before else after) / interval_s


def _by(samples: Samples, metric: str) -> dict[Labels, float]:
    return {labels: value for (name, labels), value in samples.items() if name == metric}


@dataclass(frozen=True)
class PortRate:
    """An RDMA port's state and rates between two scrapes; ``labels`` as the exporter sent
    them (device, port, and any other it added)."""

    labels: Labels
    state: str
    tx_gbps: float
    rx_gbps: float

    @property
    def link(self) -> str:
        found = dict(self.labels)
        return f"{found.get('device', '')}/{found.get('port', '')}"

    def to_dict(self) -> JsonObject:
        return {"device": "", "port": "", **dict(self.labels), "state": self.state,
                "tx_gbps": self.tx_gbps, "rx_gbps": self.rx_gbps}  # fmt: skip


@dataclass(frozen=True)
class InterfaceRate:
    """A network interface's link and its byte, packet and error rates."""

    labels: Labels
    up: bool
    tx_gbps: float
    rx_gbps: float
    tx_pps: float
    rx_pps: float
    errors_per_s: float  # receive and transmit errors and drops together

    @property
    def interface(self) -> str:
        return dict(self.labels).get("interface", "")

    def to_dict(self) -> JsonObject:
        return {
            "interface": "", **dict(self.labels), "up": self.up,
            "tx_gbps": self.tx_gbps, "rx_gbps": self.rx_gbps,
            "tx_pps": self.tx_pps, "rx_pps": self.rx_pps, "errors_per_s": self.errors_per_s,
        }  # fmt: skip


@dataclass(frozen=True)
class ProbeRtt:
    """The probe's round trips to one peer on one path: microseconds by percentile."""

    peer: str
    path: str
    us: tuple[tuple[int, float], ...]  # (percentile, microseconds), as the exporter sent them

    def at(self, percent: int) -> float | None:
        return dict(self.us).get(percent)

    def to_dict(self) -> JsonObject:
        return {"peer": self.peer, "path": self.path, **{f"p{q}_us": v for q, v in self.us}}


@dataclass(frozen=True)
class ServingState:
    """A supervised server an exporter shows (the head's): its state, restarts, last probe."""

    cluster: str
    state: str
    restarts: float | None
    probe_latency_s: float | None
    supervisor_up: bool | None

    def to_dict(self) -> JsonObject:
        return dict(self.__dict__)


@dataclass(frozen=True)
class NodeFrame:
    """One exporter's part of a frame, or why it has none (``error``)."""

    target: str
    error: str | None = None
    ports: tuple[PortRate, ...] = ()
    interfaces: tuple[InterfaceRate, ...] = ()
    probes: tuple[ProbeRtt, ...] = ()
    alerts: tuple[Labels, ...] = ()  # each alert's labels (alert, subject, ...)
    serving: tuple[ServingState, ...] = ()

    def links(self) -> list[tuple[str, float, float]]:
        """(link, tx Gb/s, rx Gb/s) of every port and interface."""
        ports = [(p.link, p.tx_gbps, p.rx_gbps) for p in self.ports]
        return ports + [(i.interface, i.tx_gbps, i.rx_gbps) for i in self.interfaces]

    def to_dict(self) -> JsonObject:
        if self.error is not None:
            return {"target": self.target, "error": self.error}
        return {
            "target": self.target,
            "ports": [p.to_dict() for p in self.ports],
            "interfaces": [i.to_dict() for i in self.interfaces],
            "probes": [p.to_dict() for p in self.probes],
            "alerts": [dict(labels) for labels in self.alerts],
            "serving": [s.to_dict() for s in self.serving],
        }


@dataclass(frozen=True)
class Frame:
    """Every node's rates over one interval (``halo top --once --json``)."""

    interval_s: float
    nodes: tuple[NodeFrame, ...]

    def to_dict(self) -> JsonObject:
        return {"interval_s": self.interval_s, "nodes": [n.to_dict() for n in self.nodes]}


def node_frame(
    target: str, first: Samples | str, second: Samples | str, interval_s: float
) -> NodeFrame:
    if isinstance(second, str):
        return NodeFrame(target, error=second)
    if isinstance(first, str):
        return NodeFrame(target, error=first)
    ports = []
    for labels, state in sorted(_by(second, "halo_rdma_port_state").items()):
        tx = _rate(first, second, ("halo_rdma_port_transmit_bytes_total", labels), interval_s)
        rx = _rate(first, second, ("halo_rdma_port_receive_bytes_total", labels), interval_s)
        ports.append(PortRate(labels, _state(state), tx * 8 / 1e9, rx * 8 / 1e9))
    interfaces = []
    for labels, up in sorted(_by(second, "halo_net_up").items()):

        def r(metric: str, labels: Labels = labels) -> float:
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
            InterfaceRate(
                labels, bool(up),
                r("halo_net_transmit_bytes_total") * 8 / 1e9,
                r("halo_net_receive_bytes_total") * 8 / 1e9,
                r("halo_net_transmit_packets_total"), r("halo_net_receive_packets_total"),
                errors,
            )
        )  # fmt: skip
    return NodeFrame(
        target,
        ports=tuple(ports),
        interfaces=tuple(interfaces),
        probes=_probes(second),
        alerts=tuple(_by(second, "halo_alert")),
        serving=serving(second),
    )


def _probes(samples: Samples) -> tuple[ProbeRtt, ...]:
    """The probe's round trips per (peer, path), their percentiles in the exporter's order;
    a sample whose quantile names no number is passed over."""
    found: dict[tuple[str, str], dict[int, float]] = {}
    for (name, labels), value in samples.items():
        if name == "halo_probe_rtt_seconds":
            d = dict(labels)
            try:
                percent = round(float(d.get("quantile", "")) * 100)
            except (ValueError, OverflowError):
                continue  # no quantile we could name
            found.setdefault((d.get("peer", ""), d.get("path", "")), {})[percent] = value * 1e6
    return tuple(ProbeRtt(p, path, tuple(found[p, path].items())) for p, path in sorted(found))


def serving(samples: Samples) -> tuple[ServingState, ...]:
    """The supervised servers an exporter shows (the head's): state, restarts, last probe."""
    out = []
    for labels, value in sorted(_by(samples, "halo_serve_state").items()):
        if value != 1:
            continue
        cluster = dict(labels).get("cluster", "")
        own = (("cluster", cluster),)

        def get(metric: str, own: Labels = own) -> float | None:
            return samples.get((metric, own))

        up = get("halo_serve_supervisor_up")
        out.append(
            ServingState(
                cluster=cluster,
                state=dict(labels).get("state", ""),
                restarts=get("halo_serve_restarts_total"),
                probe_latency_s=get("halo_serve_probe_latency_seconds"),
                supervisor_up=None if up is None else up == 1,
            )
        )
    return tuple(out)


def build_frame(
    first: Mapping[str, Samples | str], second: Mapping[str, Samples | str], interval_s: float
) -> Frame:
    nodes = tuple(node_frame(t, first[t], second[t], interval_s) for t in second)
    return Frame(interval_s, nodes)


def render_frame(frame: Frame) -> str:
    out = []
    for node in frame.nodes:
        out.append(f"== {printable(node.target)}")
        if node.error is not None:
            out.append(f"   unreachable: {printable(node.error)}")
            continue
        out += [_port_line(p) for p in node.ports]
        out += [_interface_line(i) for i in node.interfaces]
        for p in node.probes:
            p50, p99 = p.at(50), p.at(99)
            shown = (
                "no answer"
                if p50 is None or p99 is None
                else f"p50 {p50:8.1f} µs  p99 {p99:8.1f} µs"
            )
            out.append(f"   probe {printable(p.peer):<10} {printable(p.path):<7} {shown}")
        out += [
            f"   ALERT {printable(dict(a).get('alert'))}: {printable(dict(a).get('subject'))}"
            for a in node.alerts
        ]
        out += [serving_line(s) for s in node.serving]
    return "\n".join(out) + "\n"


def serving_line(s: ServingState) -> str:
    latency, restarts = s.probe_latency_s, s.restarts
    probe = "" if latency is None else f"  probe {latency * 1000:8.1f} ms"
    count = "" if restarts is None or not math.isfinite(restarts) else f"  restarts {restarts:.0f}"
    gone = "  SUPERVISOR DOWN" if s.supervisor_up is False else ""
    return f"   serve {printable(s.cluster):<16} {printable(s.state):<10}{count}{probe}{gone}"


def _port_line(p: PortRate) -> str:
    where = printable(p.link)
    rates = f"tx {p.tx_gbps:8.3f} Gb/s  rx {p.rx_gbps:8.3f} Gb/s"
    return f"   rdma {where:<16} {p.state:<8} {rates}"


def _interface_line(i: InterfaceRate) -> str:
    state = "up" if i.up else "DOWN"
    rates = f"tx {i.tx_gbps:8.3f} Gb/s  rx {i.rx_gbps:8.3f} Gb/s"
    packets = f"{i.tx_pps:9.0f}/{i.rx_pps:9.0f} pkt/s  errors {i.errors_per_s:.1f}/s"
    return f"   net  {printable(i.interface):<16} {state:<8} {rates}  {packets}"
