"""The report's drawing primitives: escaped text, axis scales, number formats, a grouped
bar chart and a line chart as inline SVG (``<svg class="chart" data-chart="…">``), and a
plain HTML table. Pure: values in, markup out."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from halo_cluster.units import human_bytes

PALETTE = ("#2b6cb0", "#dd6b20", "#2f855a", "#9b2c2c", "#6b46c1", "#b7791f", "#2c7a7b")
WIDTH, HEIGHT = 720, 300
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 30, 60


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exponent = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exponent:
            return step * exponent
    return float(10 * exponent)


def fmt(value: float) -> str:
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
    top = nice_max(max((v for _l, bars in groups for _n, v in bars), default=1.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg class="chart" data-chart="{esc(chart_id)}" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{esc(title)}">',
        f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{esc(title)}</text>',
    ]
    for tick in range(5):
        value = top * tick / 4
        y = TOP + plot_h - plot_h * tick / 4
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e2e8f0"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
            f"{fmt(value)}</text>"
        )
    parts.append(
        f'<text x="14" y="{TOP + plot_h / 2:.0f}" font-size="11" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2:.0f})" text-anchor="middle">{esc(unit)}</text>'
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
                f'height="{h:.1f}" fill="{colour[name]}"><title>{esc(name)}: {fmt(value)} '
                f"{esc(unit)}</title></rect>"
                f'<text x="{x + bar_w / 2 - 1:.1f}" y="{y - 3:.1f}" font-size="10" '
                f'text-anchor="middle">{fmt(value)}</text>'
            )
        parts.append(
            f'<text x="{LEFT + g * slot + slot / 2:.1f}" y="{TOP + plot_h + 16}" font-size="11" '
            f'text-anchor="middle">{esc(label)}</text>'
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
            f'<text x="{x + 14}" y="{HEIGHT - 9}" font-size="11">{esc(name)}</text>'
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
    y_max = math.ceil(max(ys)) if log_y else nice_max(max(ys))
    if y_max == y_min:
        y_max = y_min + 1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + plot_w * (math.log2(x) - x_min) / (x_max - x_min)

    def py(y: float) -> float:
        return TOP + plot_h - plot_h * (ty(y) - y_min) / (y_max - y_min)

    colour = {name: PALETTE[i % len(PALETTE)] for i, (name, _p) in enumerate(series)}
    parts = [
        f'<svg class="chart" data-chart="{esc(chart_id)}" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{esc(title)}">',
        f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{esc(title)}</text>',
    ]
    ticks = range(int(y_min), int(y_max) + 1) if log_y else [y_max * t / 4 for t in range(5)]
    for tick in ticks:
        value = 10**tick if log_y else float(tick)
        y = py(value) if value > 0 else TOP + plot_h
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e2e8f0"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
            f"{fmt(value)}</text>"
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
        f'text-anchor="middle">{esc(x_label)}</text>'
        f'<text x="14" y="{TOP + plot_h / 2:.0f}" font-size="11" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2:.0f})" text-anchor="middle">'
        f"{esc(y_label)}</text>"
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
            f"<title>{esc(name)}: {human_bytes(x)} {fmt(y)}</title></circle>"
            for x, y in good
        ]
    parts.append(_legend([n for n, _p in series], colour))
    parts.append("</svg>")
    return "".join(parts)


def time_chart(
    chart_id: str,
    title: str,
    y_label: str,
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
) -> str:
    """Lines over a linear x axis of seconds, y linear from 0 (watts over a run)."""
    points = [(x, y) for _n, pts in series for x, y in pts]
    if not points:
        return ""
    x_max = max(x for x, _y in points) or 1.0
    y_max = nice_max(max(y for _x, y in points))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + plot_w * x / x_max

    def py(y: float) -> float:
        return TOP + plot_h - plot_h * y / y_max

    colour = {name: PALETTE[i % len(PALETTE)] for i, (name, _p) in enumerate(series)}
    parts = [
        f'<svg class="chart" data-chart="{esc(chart_id)}" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{esc(title)}">',
        f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{esc(title)}</text>',
    ]
    for tick in range(5):
        y, x = py(y_max * tick / 4), px(x_max * tick / 4)
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e2e8f0"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
            f"{fmt(y_max * tick / 4)}</text>"
            f'<text x="{x:.1f}" y="{TOP + plot_h + 16}" font-size="10" text-anchor="middle">'
            f"{fmt(x_max * tick / 4)}</text>"
        )
    parts.append(
        f'<text x="{LEFT + plot_w / 2:.0f}" y="{TOP + plot_h + 32}" font-size="11" '
        f'text-anchor="middle">seconds</text>'
        f'<text x="14" y="{TOP + plot_h / 2:.0f}" font-size="11" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2:.0f})" text-anchor="middle">'
        f"{esc(y_label)}</text>"
    )
    for name, pts in series:
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        parts.append(
            f'<polyline class="line" fill="none" stroke="{colour[name]}" stroke-width="2" '
            f'points="{path}"/>'
        )
    parts.append(_legend([n for n, _p in series], colour))
    parts.append("</svg>")
    return "".join(parts)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{esc('-' if v is None else v)}</td>" for v in row) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"
