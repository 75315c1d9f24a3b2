"""``halo report``: one self-contained HTML file from benchmark results — inline CSS and SVG,
no script and nothing fetched, so it opens anywhere (a mail attachment, an air-gapped host).

Pure: ``render(results)`` takes loaded result objects and returns the page. Every chart is an
``<svg class="chart" data-chart="…">``; every string from a result is escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from halo_cluster import __version__
from halo_cluster.units import human_bytes

PALETTE = ("#2b6cb0", "#dd6b20", "#2f855a", "#9b2c2c", "#6b46c1", "#b7791f", "#2c7a7b")
PATH_NAMES = {"mgmt": "Ethernet (mgmt)", "fabric": "fabric TCP", "rdma": "RDMA"}
WIDTH, HEIGHT = 720, 300
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 30, 60

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 980px; color: #1a202c;
       background: #fff; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #cbd5e0; }
.meta { color: #4a5568; } table { border-collapse: collapse; margin: 0.5em 0 1em; }
td, th { border: 1px solid #cbd5e0; padding: 3px 8px; text-align: left; font-size: 13px; }
th { background: #edf2f7; } svg.chart { display: block; margin: 0.6em 0; background: #fcfcfd;
       border: 1px solid #e2e8f0; } .note { color: #718096; font-size: 12px; }
.warn { color: #9b2c2c; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exponent = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exponent:
            return step * exponent
    return float(10 * exponent)


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def bar_chart(
    chart_id: str, title: str, unit: str, groups: Sequence[tuple[str, Sequence[tuple[str, float]]]]
) -> str:
    """Grouped vertical bars: one group per label, one bar per series, values printed."""
    series = list(dict.fromkeys(name for _label, bars in groups for name, _v in bars))
    colour = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(series)}
    top = _nice_max(max((v for _l, bars in groups for _n, v in bars), default=1.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg class="chart" data-chart="{_e(chart_id)}" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{_e(title)}">',
        f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{_e(title)}</text>',
    ]
    for tick in range(5):
        value = top * tick / 4
        y = TOP + plot_h - plot_h * tick / 4
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e2e8f0"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
            f"{_fmt(value)}</text>"
        )
    parts.append(
        f'<text x="14" y="{TOP + plot_h / 2:.0f}" font-size="11" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2:.0f})" text-anchor="middle">{_e(unit)}</text>'
    )
    slot = plot_w / max(1, len(groups))
    bar_w = min(60.0, slot * 0.8 / max(1, len(series)))
    for g, (label, bars) in enumerate(groups):
        x0 = LEFT + g * slot + (slot - bar_w * len(bars)) / 2
        for b, (name, value) in enumerate(bars):
            h = plot_h * value / top
            x = x0 + b * bar_w
            y = TOP + plot_h - h
            parts.append(
                f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{bar_w - 2:.1f}" '
                f'height="{h:.1f}" fill="{colour[name]}"><title>{_e(name)}: {_fmt(value)} '
                f"{_e(unit)}</title></rect>"
                f'<text x="{x + bar_w / 2 - 1:.1f}" y="{y - 3:.1f}" font-size="10" '
                f'text-anchor="middle">{_fmt(value)}</text>'
            )
        parts.append(
            f'<text x="{LEFT + g * slot + slot / 2:.1f}" y="{TOP + plot_h + 16}" font-size="11" '
            f'text-anchor="middle">{_e(label)}</text>'
        )
    parts.append(_legend(series, colour))
    parts.append("</svg>")
    return "".join(parts)


def _legend(series: Sequence[str], colour: dict[str, str]) -> str:
    parts = []
    x = LEFT
    for name in series:
        parts.append(
            f'<rect x="{x}" y="{HEIGHT - 18}" width="10" height="10" fill="{colour[name]}"/>'
            f'<text x="{x + 14}" y="{HEIGHT - 9}" font-size="11">{_e(name)}</text>'
        )
        x += 24 + 7 * len(name)
    return "".join(parts)


def line_chart(
    chart_id: str,
    title: str,
    x_label: str,
    y_label: str,
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    log_y: bool,
) -> str:
    """Lines over a log2 x axis (message size), y linear or log10."""
    points = [(x, y) for _n, pts in series for x, y in pts if x > 0 and y > 0]
    if not points:
        return ""
    xs = [math.log2(x) for x, _y in points]
    x_min, x_max = min(xs), max(xs)
    if x_max == x_min:
        x_max = x_min + 1

    def ty(y: float) -> float:
        return math.log10(y) if log_y else y

    ys = [ty(y) for _x, y in points]
    y_min = math.floor(min(ys)) if log_y else 0.0
    y_max = math.ceil(max(ys)) if log_y else _nice_max(max(ys))
    if y_max == y_min:
        y_max = y_min + 1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + plot_w * (math.log2(x) - x_min) / (x_max - x_min)

    def py(y: float) -> float:
        return TOP + plot_h - plot_h * (ty(y) - y_min) / (y_max - y_min)

    colour = {name: PALETTE[i % len(PALETTE)] for i, (name, _p) in enumerate(series)}
    parts = [
        f'<svg class="chart" data-chart="{_e(chart_id)}" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{_e(title)}">',
        f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{_e(title)}</text>',
    ]
    ticks = range(int(y_min), int(y_max) + 1) if log_y else [y_max * t / 4 for t in range(5)]
    for tick in ticks:
        value = 10**tick if log_y else float(tick)
        y = py(value) if value > 0 else TOP + plot_h
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e2e8f0"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
            f"{_fmt(value)}</text>"
        )
    step = max(1, round((x_max - x_min) / 8))
    for power in range(math.ceil(x_min), int(x_max) + 1, step):
        x = px(2**power)
        parts.append(
            f'<text x="{x:.1f}" y="{TOP + plot_h + 16}" font-size="10" text-anchor="middle">'
            f"{human_bytes(2**power)}</text>"
        )
    parts.append(
        f'<text x="{LEFT + plot_w / 2:.0f}" y="{TOP + plot_h + 32}" font-size="11" '
        f'text-anchor="middle">{_e(x_label)}</text>'
        f'<text x="14" y="{TOP + plot_h / 2:.0f}" font-size="11" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2:.0f})" text-anchor="middle">'
        f"{_e(y_label)}</text>"
    )
    for name, pts in series:
        good = [(x, y) for x, y in pts if x > 0 and y > 0]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in good)
        parts.append(
            f'<polyline class="line" fill="none" stroke="{colour[name]}" stroke-width="2" '
            f'points="{path}"/>'
        )
        parts += [
            f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{colour[name]}">'
            f"<title>{_e(name)}: {human_bytes(x)} {_fmt(y)}</title></circle>"
            for x, y in good
        ]
    parts.append(_legend([n for n, _p in series], colour))
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{_e('-' if v is None else v)}</td>" for v in row) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _label(result: dict[str, Any], index: int) -> str:
    return str(result.get("label") or f"#{index + 1} {result.get('created', '')}")


def net_section(results: Sequence[tuple[str, dict[str, Any]]]) -> str:
    latency: list[tuple[str, list[tuple[str, float]]]] = []
    bandwidth: list[tuple[str, list[tuple[str, float]]]] = []
    rows = []
    for label, result in results:
        by_pair: dict[str, list[dict[str, Any]]] = {}
        for p in result.get("paths", []):
            by_pair.setdefault(f"{p['node']}↔{p['peer']}", []).append(p)
        for pair, paths in by_pair.items():
            group = f"{pair} ({label})" if len(results) > 1 else pair
            lat = [
                (PATH_NAMES.get(p["path"], p["path"]), float(p["latency_us"]["p50"]))
                for p in paths
                if p.get("latency_us")
            ]
            bw = [
                (PATH_NAMES.get(p["path"], p["path"]), float(p["bandwidth_gbps"]))
                for p in paths
                if p.get("bandwidth_gbps") is not None
            ]
            if lat:
                latency.append((group, lat))
            if bw:
                bandwidth.append((group, bw))
            for p in paths:
                lat_d = p.get("latency_us") or {}
                rows.append(
                    [
                        group,
                        PATH_NAMES.get(p["path"], p["path"]),
                        lat_d.get("p50"),
                        lat_d.get("p99"),
                        lat_d.get("tool"),
                        p.get("bandwidth_gbps"),
                        p.get("bandwidth_tool"),
                        p.get("pct_line_rate"),
                        p.get("pct_pcie"),
                    ]
                )
    if not rows:
        return ""
    return (
        "<h2>Links: latency and bandwidth per path</h2>"
        + bar_chart("net-latency", "Latency p50, one way", "µs", latency)
        + bar_chart("net-bandwidth", "Bandwidth", "Gb/s", bandwidth)
        + _table(
            [
                "pair",
                "path",
                "p50 µs",
                "p99 µs",
                "latency tool",
                "Gb/s",
                "bw tool",
                "% line",
                "% PCIe",
            ],
            rows,
        )
        + '<p class="note">Latency is one way (half the round trip), as perftest and sockperf '
        "report it. A tool named builtin is halo's own TCP probe.</p>"
    )


def collective_section(results: Sequence[tuple[str, dict[str, Any]]]) -> str:
    if not results:
        return ""
    times, busbw, fits = [], [], []
    for label, result in results:
        transport = result.get("transport") or {}
        name = f"{label}: {result.get('backend')} {transport.get('transport', '')}".strip()
        sweep = result.get("sweep", [])
        times.append((name, [(float(r["bytes"]), float(r["time_us"])) for r in sweep]))
        busbw.append((name, [(float(r["bytes"]), float(r["busbw_gbs"])) for r in sweep]))
        fit = result.get("fit") or {}
        fits.append(
            [
                name,
                result.get("world_size"),
                fit.get("alpha_us"),
                fit.get("beta_gbps"),
                fit.get("max_rel_error"),
                transport.get("transport"),
            ]
        )
    return (
        "<h2>All-reduce over message size</h2>"
        + line_chart("allreduce-time", "All-reduce time", "message size", "µs", times, True)
        + line_chart(
            "allreduce-busbw", "All-reduce bus bandwidth", "message size", "GB/s", busbw, False
        )
        + _table(["run", "ranks", "α µs/step", "β Gb/s", "worst fit error", "transport"], fits)
        + '<p class="note">busbw = algbw × 2(n−1)/n (nccl-tests). The fit is the ring model '
        "t = 2(n−1)·α + 2(n−1)/n · size/β that halo plan --link uses.</p>"
    )


def tp_section(results: Sequence[tuple[str, dict[str, Any]]]) -> str:
    if not results:
        return ""
    groups: list[tuple[str, list[tuple[str, float]]]] = []
    rows = []
    for label, result in results:
        model = result.get("model", {})
        name = str(model.get("id") or model.get("name"))
        bars = []
        for row in result.get("rows", []):
            bars.append((f"batch {row['batch']}", float(row["network_ms_per_token"])))
            rows.append(
                [
                    name,
                    label,
                    row["batch"],
                    row["allreduces_per_token"],
                    row["bytes_per_allreduce"],
                    row["network_ms_per_token"],
                    row["tokens_per_s_ceiling"],
                ]
            )
        groups.append((name, bars))
    names = [g for g, _b in groups]
    if len(set(names)) < len(names):  # the same model twice: tell the runs apart
        groups = [
            (f"{g} ({label})", b) for (g, b), (label, _r) in zip(groups, results, strict=True)
        ]
    return (
        "<h2>Network cost per generated token</h2>"
        + bar_chart("tp-per-token", "Network ms per token (decode replay)", "ms", groups)
        + _table(
            ["model", "run", "batch", "all-reduces", "bytes each", "ms / token", "tok/s ceiling"],
            rows,
        )
    )


def stamp_section(results: Sequence[tuple[str, dict[str, Any]]]) -> str:
    parts = ["<h2>Plan stamp</h2>"]
    for label, result in results:
        nodes = result.get("nodes") or {}
        parts.append(
            f"<h3>{_e(label)} — {_e(result.get('kind'))}, {_e(result.get('created'))}</h3>"
        )
        if result.get("incomplete"):
            parts.append(f'<p class="warn">incomplete: {_e(result["incomplete"])}</p>')
        rows = [
            [
                name,
                n.get("hostname"),
                n.get("transport"),
                n.get("hca"),
                n.get("gid_index"),
                n.get("socket_ifname"),
                n.get("mtu"),
                n.get("fabric_address"),
                n.get("mgmt_address"),
                ", ".join(f"{k} {v}" for k, v in (n.get("versions") or {}).items() if v),
            ]
            for name, n in nodes.items()
        ]
        parts.append(
            _table(
                [
                    "node",
                    "host",
                    "transport",
                    "HCA",
                    "GID",
                    "interface",
                    "MTU",
                    "fabric",
                    "mgmt",
                    "versions",
                ],
                rows,
            )
        )
        versions = result.get("versions") or {}
        parts.append(
            '<p class="meta">'
            + _e(", ".join(f"{k} {v}" for k, v in versions.items() if v))
            + f" — from {_e(result.get('host'))}</p>"
        )
    return "".join(parts)


def render(results: Sequence[dict[str, Any]], title: str = "halo fabric report") -> str:
    labelled = [(_label(r, i), r) for i, r in enumerate(results)]
    by_kind: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for label, result in labelled:
        by_kind.setdefault(str(result.get("kind")), []).append((label, result))
    body = (
        net_section(by_kind.get("net", []))
        + collective_section(by_kind.get("collective", []))
        + tp_section(by_kind.get("tp", []))
        + stamp_section(labelled)
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>"
        f'<h1>{_e(title)}</h1><p class="meta">{len(results)} result(s), '
        f"written by halo {_e(__version__)}</p>{body}</body></html>\n"
    )
