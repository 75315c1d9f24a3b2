"""``halo exporter``: samples every interval in the background, probes peers, evaluates
alerts, and serves the latest state at ``/metrics`` (never failing a scrape).

A page is rendered once per sample, by the first scrape that asks for it; other scrapes
of the same sample get the same bytes."""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from halo_cluster.monitor.alerts import Alert, evaluate_alerts
from halo_cluster.monitor.exposition import render
from halo_cluster.monitor.httpd import MetricsServer
from halo_cluster.monitor.probes import Prober, Target
from halo_cluster.monitor.rates import rates
from halo_cluster.monitor.rdma_probe import RdmaProber
from halo_cluster.monitor.sampler import Sampler
from halo_cluster.monitor.serving import serving_series
from halo_cluster.monitor.snapshot import Labels, Snapshot
from halo_cluster.units import wait_seconds

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class State:
    current: Snapshot
    previous: Snapshot | None
    alerts: list[Alert]


class Exporter:
    def __init__(
        self,
        sampler: Sampler,
        targets: list[Target],
        interval_s: float,
        baseline_s: Mapping[tuple[str, str], float] | None = None,
    ) -> None:
        self.sampler = sampler
        self.targets = targets
        self.interval_s = interval_s
        self.baseline_s = dict(baseline_s or {})
        self.lock = threading.Lock()
        first = sampler.sample()
        self.state = State(first, None, [])
        self.prober = Prober(targets, interval_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="halo-sampler", daemon=True)
        self._page: tuple[int, bytes] = (-1, b"")  # (sample number, rendered page)
        self._samples = 0
        self._last_error = ""
        self._logged: set[str] = set()

    def start(self) -> None:
        self.prober.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.prober.stop()
        self.sampler.close()

    def _run(self) -> None:
        while not self._stop.wait(wait_seconds(self.interval_s)):
            try:
                self.tick()
            except Exception as err:  # a long-lived sampler reports, and samples again
                self.sampler.scrape_errors += 1
                text = f"halo exporter: sampling failed: {type(err).__name__}: {err}"
                if text != self._last_error:  # once per distinct error, never a traceback
                    print(text.encode("unicode_escape").decode(), file=sys.stderr, flush=True)
                    self._last_error = text

    def tick(self) -> None:
        snapshot = self.sampler.sample()
        with self.lock:
            previous = self.state.current
        latency = {(t.peer, t.path): t.quantile(0.5) for t in self.targets}
        for target, p50 in latency.items():  # no measured baseline: the first steady value
            if p50 is not None and len(self._target(target).rtts_s) >= 10:
                self.baseline_s.setdefault(target, p50)
        alerts = evaluate_alerts(
            snapshot.values, rates(previous, snapshot), latency, self.baseline_s
        )
        with self.lock:
            self.state = State(snapshot, previous, alerts)
            self._samples += 1

    def _target(self, key: tuple[str, str]) -> Target:
        return next(t for t in self.targets if (t.peer, t.path) == key)

    rdma: RdmaProber | None = None
    state_dir: str | None = None  # halo's state directory here: the supervisor's state

    def page(self, target: str) -> tuple[int, str, bytes]:
        """What the HTTP server answers for a request target."""
        path = target.split("?", 1)[0]
        if path.startswith(("http://", "https://")):  # absolute form
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        if path == "/metrics":
            return 200, CONTENT_TYPE, self.metrics_bytes()
        if path == "/":
            return 200, "text/plain; charset=utf-8", b"halo exporter: see /metrics\n"
        return 404, "text/plain; charset=utf-8", b"only /metrics here\n"

    def metrics_bytes(self) -> bytes:
        """The page of the latest sample, rendered once."""
        with self.lock:
            number, page = self._page
            if number == self._samples:
                return page
            number = self._samples
        page = self.metrics().encode()
        with self.lock:
            if number == self._samples:
                self._page = (number, page)
        return page

    def metrics(self) -> str:
        with self.lock:
            state = self.state
        extra: list[tuple[str, Labels, float]] = []
        for rt in self.rdma.targets if self.rdma else []:
            if rt.latency_s is not None:
                extra.append(
                    ("halo_rdma_probe_latency_seconds", (("peer", rt.peer),), rt.latency_s)
                )
            extra.append(
                ("halo_rdma_probe_failures_total", (("peer", rt.peer),), float(rt.failures))
            )
        for t in self.targets:
            labels: Labels = (("peer", t.peer), ("path", t.path))
            for q in (0.5, 0.9, 0.99):
                value = t.quantile(q)
                if value is not None:
                    extra.append(("halo_probe_rtt_seconds", (*labels, ("quantile", str(q))), value))
            extra.append(("halo_probe_rtt_seconds_sum", labels, t.total_s))
            extra.append(("halo_probe_rtt_seconds_count", labels, float(t.count)))
            extra.append(("halo_probe_failures_total", labels, float(t.failures)))
        for alert in state.alerts:
            extra.append(("halo_alert", (("alert", alert.name), ("subject", alert.subject)), 1.0))
        served, problems = serving_series(self.state_dir)
        extra += served
        for problem in problems:
            self._log_once(f"halo exporter: supervisor state: {problem}")
        dropped: list[str] = []
        page = render(state.current.values, extra, dropped)
        for reason in dropped:
            self._log_once(f"halo exporter: left out of /metrics: {reason}")
        return page

    def _log_once(self, text: str) -> None:
        """A line on stderr, once per distinct text (a page is rendered every interval),
        control characters escaped."""
        if text in self._logged:
            return
        if len(self._logged) > 1000:  # a node's series come and go: do not grow without bound
            self._logged.clear()
        self._logged.add(text)
        print(text.encode("unicode_escape").decode(), file=sys.stderr, flush=True)


def serve(exporter: Exporter, address: str, port: int) -> MetricsServer:
    """The /metrics server (see monitor/httpd.py); raises ListenError (one line) when the
    address cannot be listened on."""
    return MetricsServer(address, port, exporter.page)
