"""``halo top``: a Textual dashboard fed by every node's exporter (imported only for it)."""

from __future__ import annotations

from collections import deque
from typing import Any, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Header, Static

from halo_cluster.monitor.frame import build_frame

SPARK = "▁▂▃▄▅▆▇█"
HISTORY = 30


def sparkline(values: list[float]) -> str:
    if not values:
        return ""
    top = max(values) or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1)))] for v in values)


class TopApp(App[None]):
    """Per node and port: Gb/s with sparklines, packet and error rates, probe latency, alerts."""

    TITLE = "halo top"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("p", "pause", "Pause"),
        Binding("s", "sort", "Sort by throughput"),
    ]

    def __init__(self, targets: list[str], interval_s: float, scraper: Any = None) -> None:
        super().__init__()
        from halo_cluster.cli.monitor import scrape

        self.targets = targets
        self.interval_s = interval_s
        self.scrape = scraper or scrape
        self.paused = False
        self.sort_by_rate = False
        self.previous: dict[str, Any] = {}
        self.history: dict[str, deque[float]] = {}
        self.frame: dict[str, Any] = {"nodes": []}

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
        self.previous = {t: self.scrape(t) for t in self.targets}
        self.set_interval(self.interval_s, self.refresh_frame)

    def refresh_frame(self) -> None:
        if self.paused:
            return
        current = {t: self.scrape(t) for t in self.targets}
        self.frame = build_frame(self.previous, current, self.interval_s)
        self.previous = current
        self.render_frame()

    def rows(self) -> list[tuple[str, ...]]:
        rows: list[tuple[str, ...]] = []
        for node in self.frame["nodes"]:
            if "error" in node:
                rows.append((node["target"], "-", "unreachable", "-", "-", "", "-", "-"))
                continue
            for p in node["ports"]:
                name = f"{p['device']}/{p['port']}"
                rows.append(
                    self._row(
                        node["target"], name, p["state"], p["tx_gbps"], p["rx_gbps"], "-", "-"
                    )
                )
            for i in node["interfaces"]:
                errors = f"[red]{i['errors_per_s']:.1f}[/]" if i["errors_per_s"] > 0 else "0"
                rows.append(
                    self._row(
                        node["target"],
                        i["interface"],
                        "up" if i["up"] else "[red]DOWN[/]",
                        i["tx_gbps"],
                        i["rx_gbps"],
                        f"{i['tx_pps'] + i['rx_pps']:.0f}",
                        errors,
                    )
                )
        return rows

    def _row(
        self, node: str, link: str, state: str, tx: float, rx: float, pps: str, errors: str
    ) -> tuple[str, ...]:
        history = self.history.setdefault(f"{node}/{link}", deque(maxlen=HISTORY))
        history.append(tx + rx)
        return (node, link, state, f"{tx:.3f}", f"{rx:.3f}", sparkline(list(history)), pps, errors)

    def render_frame(self) -> None:
        links = self.query_one("#links", DataTable)
        links.clear()
        rows = self.rows()
        if self.sort_by_rate:
            rows.sort(key=lambda r: -(float(r[3]) + float(r[4])) if r[3] != "-" else 0.0)
        for row in rows:
            links.add_row(*row)
        probes = self.query_one("#probes", DataTable)
        probes.clear()
        alerts = []
        for node in self.frame["nodes"]:
            for p in node.get("probes", []):
                probes.add_row(
                    node["target"],
                    p["peer"],
                    p["path"],
                    f"{p.get('p50_us', 0):.1f}",
                    f"{p.get('p99_us', 0):.1f}",
                )
            alerts += [
                f"{node['target']}: {a.get('alert')} {a.get('subject')}"
                for a in node.get("alerts", [])
            ]
        self.query_one("#alerts", Static).update(
            "\n".join(f"[red]ALERT[/] {a}" for a in alerts) or "no alerts"
        )

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.sub_title = "paused" if self.paused else ""

    def action_sort(self) -> None:
        self.sort_by_rate = not self.sort_by_rate
        self.render_frame()


def run_tui(targets: list[str], interval_s: float) -> None:
    TopApp(targets, interval_s).run()
