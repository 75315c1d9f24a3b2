"""``halo top``: a Textual dashboard fed by every node's exporter (imported only for it)."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Header, Static

from halo_cluster.monitor.frame import Frame, NodeFrame, Samples, node_frame, serving_line
from halo_cluster.printable import printable

SPARK = "▁▂▃▄▅▆▇█"
HISTORY = 30
Scraper = Callable[[str], "Samples | str"]


def sparkline(values: list[float]) -> str:
    """One bar per value, scaled to the largest; a value that is not a finite number (an
    exporter may send one) is drawn as the lowest bar."""
    finite = [v if math.isfinite(v) and v > 0 else 0.0 for v in values]
    if not finite:
        return ""
    top = max(finite) or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, round(v / top * (len(SPARK) - 1)))] for v in finite)


class TopApp(App[None]):
    """Per node and port: Gb/s with sparklines, packet and error rates, probe latency, alerts.

    Every exporter is scraped on its own worker thread, at most one scrape per exporter in
    flight: the screen never waits for a slow or dead exporter (its row says so), and each
    node's rates use the time between its own two scrapes."""

    TITLE = "halo top"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("p", "pause", "Pause"),
        Binding("s", "sort", "Sort by throughput"),
    ]

    def __init__(
        self,
        targets: list[str],
        interval_s: float,
        scraper: Scraper | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        from halo_cluster.monitor.scrape import scrape

        self.targets = targets
        self.interval_s = interval_s
        self.scrape: Scraper = scraper or scrape
        self.clock = clock
        self.paused = False
        self.sort_by_rate = False
        self.latest: dict[str, tuple[float, Samples | str]] = {}  # target -> (when, scrape)
        self.nodes: dict[str, NodeFrame] = {}  # target -> its latest node frame
        self.in_flight: dict[str, float] = {}  # target -> when its scrape started
        self.history: dict[str, deque[float]] = {}
        self.frame = Frame(interval_s, ())

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="links")
        yield DataTable(id="probes")
        yield Static("", id="alerts")
        yield Footer()

    def on_mount(self) -> None:
        links = self.query_one("#links", DataTable)
        links.add_columns(
            "node", "link", "state", "tx Gb/s", "rx Gb/s", "history", "pkt/s", "errors/s"
        )
        self.query_one("#probes", DataTable).add_columns("node", "peer", "path", "p50 µs", "p99 µs")
        self.poll()
        self.set_interval(self.interval_s, self.poll)

    def poll(self) -> None:
        """Start a scrape of every exporter that is not still answering the previous one."""
        if self.paused:
            return
        if self.waiting():
            self.render_frame()  # say which exporter is slow, without waiting for it
        for target in self.targets:
            if target in self.in_flight:
                continue
            self.in_flight[target] = self.clock()
            threading.Thread(
                target=self._scrape_one, args=(target,), name=f"halo-top-{target}", daemon=True
            ).start()

    def _scrape_one(self, target: str) -> None:
        """On a worker thread: the scrape, then its result handed to the UI thread."""
        try:
            samples = self.scrape(target)
        except Exception as err:  # a scraper bug must not end the dashboard
            samples = f"{target}: {type(err).__name__}: {err}"
        with contextlib.suppress(RuntimeError):  # the app has ended meanwhile
            self.call_from_thread(self.arrived, target, samples, self.clock())

    def arrived(self, target: str, samples: Samples | str, at: float) -> None:
        """On the UI thread: one exporter's scrape; its node's rates from its last two."""
        self.in_flight.pop(target, None)
        previous = self.latest.get(target)
        self.latest[target] = (at, samples)
        if previous is None and not isinstance(samples, str):
            return  # rates need two scrapes
        since = previous[0] if previous else at
        first = previous[1] if previous else samples
        node = node_frame(target, first, samples, max(at - since, 1e-6))
        self.nodes[target] = node
        for link, tx, rx in node.links():
            self.history.setdefault(f"{target}/{link}", deque(maxlen=HISTORY)).append(tx + rx)
        self.frame = Frame(self.interval_s, tuple(self.ordered()))
        self.render_frame()

    def ordered(self) -> list[NodeFrame]:
        return [self.nodes[t] for t in self.targets if t in self.nodes]

    def waiting(self) -> list[str]:
        """Targets whose scrape has taken longer than two intervals."""
        now = self.clock()
        return [t for t, start in self.in_flight.items() if now - start > 2 * self.interval_s]

    def rows(self) -> list[tuple[Text, ...]]:
        """The links table. Everything an exporter sent is shown as plain text (a name may
        hold Rich markup or control characters); only our own states are styled."""
        rows: list[tuple[Text, ...]] = []
        slow = set(self.waiting())
        for target in self.targets:
            node = self.nodes.get(target)
            if target in slow:
                rows.append(_status(target, "slow to answer", "yellow"))
            elif node is None:
                rows.append(_status(target, "waiting", "yellow"))
            if node is None:
                continue
            if node.error is not None:
                rows.append(_status(target, "unreachable", "red"))
                continue
            for p in node.ports:
                state = (p.state, "" if p.state == "ACTIVE" else "red")
                rows.append(self._row(target, p.link, state, p.tx_gbps, p.rx_gbps, "-", "-"))
            for i in node.interfaces:
                errors = i.errors_per_s
                rows.append(
                    self._row(
                        target,
                        i.interface,
                        ("up", "") if i.up else ("DOWN", "red"),
                        i.tx_gbps,
                        i.rx_gbps,
                        f"{i.tx_pps + i.rx_pps:.0f}",
                        (f"{errors:.1f}", "red") if errors > 0 else "0",
                    )
                )
        return rows

    def _row(
        self,
        node: str,
        link: str,
        state: tuple[str, str],
        tx: float,
        rx: float,
        pps: str,
        errors: str | tuple[str, str],
    ) -> tuple[Text, ...]:
        history = list(self.history.get(f"{node}/{link}", ()))
        return _cells(node, link, state, f"{tx:.3f}", f"{rx:.3f}", sparkline(history), pps, errors)

    def render_frame(self) -> None:
        links = self.query_one("#links", DataTable)
        links.clear()
        rows = self.rows()
        if self.sort_by_rate:
            rows.sort(key=_throughput)
        for row in rows:
            links.add_row(*row)
        probes = self.query_one("#probes", DataTable)
        probes.clear()
        alerts: list[Text] = []
        for node in self.frame.nodes:
            for p in node.probes:
                probes.add_row(
                    *_cells(
                        node.target,
                        p.peer,
                        p.path,
                        f"{p.at(50) or 0:.1f}",
                        f"{p.at(99) or 0:.1f}",
                    )
                )
            alerts += [
                Text.assemble(
                    ("ALERT ", "red"),
                    printable(f"{node.target}: {dict(a).get('alert')} {dict(a).get('subject')}"),
                )
                for a in node.alerts
            ]
            alerts += [
                Text.assemble(("SERVE ", "bold"), serving_line(s).strip()) for s in node.serving
            ]
        shown = Text("\n").join(alerts) if alerts else Text("no alerts")
        self.query_one("#alerts", Static).update(shown)

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.sub_title = "paused" if self.paused else ""

    def action_sort(self) -> None:
        self.sort_by_rate = not self.sort_by_rate
        self.render_frame()


def _cells(*values: str | tuple[str, str]) -> tuple[Text, ...]:
    """Table cells as plain text (never parsed as markup); a (text, style) pair is styled,
    control characters are shown escaped."""
    cells = []
    for value in values:
        text, style = value if isinstance(value, tuple) else (value, "")
        cells.append(Text(printable(text), style=style))
    return tuple(cells)


def _status(target: str, state: str, style: str) -> tuple[Text, ...]:
    return _cells(target, "-", (state, style), "-", "-", "", "-", "-")


def _throughput(row: tuple[Text, ...]) -> float:
    tx, rx = row[3].plain, row[4].plain
    return 0.0 if tx == "-" else -(float(tx) + float(rx))


def run_tui(targets: list[str], interval_s: float) -> None:
    TopApp(targets, interval_s).run()
