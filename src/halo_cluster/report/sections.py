"""The report's sections, one per result kind (net, collective, tp, tune, run) and the
stamps of every result (plans, versions, host): loaded result objects in, HTML out. Each
section reads its kind by the types schema.py declares, which loading checked
(``check_result``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from halo_cluster.report.svg import bar_chart, esc, line_chart, table
from halo_cluster.schema import (
    CollectiveBenchResult,
    NetBenchResult,
    NetPath,
    RunResult,
    Stamp,
    TpBenchResult,
    TuneResult,
    stamp_hca,
)
from halo_cluster.witness.tokens import tokens_word

PATH_NAMES = {"mgmt": "Ethernet (mgmt)", "fabric": "fabric TCP", "rdma": "RDMA"}


def result_label(result: dict[str, Any], index: int) -> str:
    return str(result.get("label") or f"#{index + 1} {result.get('created', '')}")


def net_section(results: Sequence[tuple[str, NetBenchResult]]) -> str:
    latency: list[tuple[str, list[tuple[str, float]]]] = []
    bandwidth: list[tuple[str, list[tuple[str, float]]]] = []
    rows = []
    for label, result in results:
        by_pair: dict[str, list[NetPath]] = {}
        for p in result.get("paths", []):
            by_pair.setdefault(f"{p['node']}↔{p['peer']}", []).append(p)
        for pair, paths in by_pair.items():
            group = f"{pair} ({label})" if len(results) > 1 else pair
            lat = [
                (PATH_NAMES.get(p["path"], p["path"]), float(found["p50"]))
                for p in paths
                if (found := p.get("latency_us"))
            ]
            bw = [
                (PATH_NAMES.get(p["path"], p["path"]), float(rate))
                for p in paths
                if (rate := p.get("bandwidth_gbps")) is not None
            ]
            if lat:
                latency.append((group, lat))
            if bw:
                bandwidth.append((group, bw))
            for p in paths:
                lat_d = p.get("latency_us")
                rows.append(
                    [
                        group,
                        PATH_NAMES.get(p["path"], p["path"]),
                        lat_d.get("p50") if lat_d else None,
                        lat_d.get("p99") if lat_d else None,
                        lat_d.get("tool") if lat_d else None,
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
        + table(
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


def collective_section(results: Sequence[tuple[str, CollectiveBenchResult]]) -> str:
    if not results:
        return ""
    times, busbw, fits = [], [], []
    for label, result in results:
        transport = result.get("transport") or {}
        name = f"{label}: {result.get('backend')} {transport.get('transport', '')}".strip()
        sweep = result.get("sweep", [])
        times.append((name, [(float(r["bytes"]), float(r["time_us"])) for r in sweep]))
        busbw.append((name, [(float(r["bytes"]), float(r["busbw_gbs"])) for r in sweep]))
        fit = result.get("fit")
        fits.append(
            [
                name,
                result.get("world_size"),
                fit.get("alpha_us") if fit else None,
                fit.get("beta_gbps") if fit else None,
                fit.get("max_rel_error") if fit else None,
                transport.get("transport"),
            ]
        )
    return (
        "<h2>All-reduce over message size</h2>"
        + line_chart("allreduce-time", "All-reduce time", "message size", "µs", times, True)
        + line_chart(
            "allreduce-busbw", "All-reduce bus bandwidth", "message size", "GB/s", busbw, False
        )
        + table(["run", "ranks", "α µs/step", "β Gb/s", "worst fit error", "transport"], fits)
        + '<p class="note">busbw = algbw × 2(n−1)/n (nccl-tests). The fit is the ring model '
        "t = 2(n−1)·α + 2(n−1)/n · size/β that halo plan --link uses.</p>"
    )


def tp_section(results: Sequence[tuple[str, TpBenchResult]]) -> str:
    if not results:
        return ""
    groups: list[tuple[str, list[tuple[str, float]]]] = []
    rows = []
    for label, result in results:
        model = result.get("model") or {}
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
                    row.get("tokens_per_s_ceiling"),
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
        + table(
            ["model", "run", "batch", "all-reduces", "bytes each", "ms / token", "tok/s ceiling"],
            rows,
        )
    )


def tune_section(results: Sequence[tuple[str, TuneResult]]) -> str:
    """halo tune: per layout, the planner's predicted tokens/s beside the measured, at the
    lowest concurrency (a chart) and at every level (a table), with each row's cause."""
    if not results:
        return ""
    parts = ["<h2>Layouts: predicted and measured</h2>"]
    for label, result in results:
        levels = [str(c) for c in result.get("concurrency", [])]
        first = levels[0] if levels else "1"
        groups = []
        rows = []
        for row in result.get("rows", []):
            name = row["layout"]["name"]
            predicted = row.get("predicted_tokens_per_s") or {}
            measured = row.get("measured") or {}
            bars = [
                (f"predicted c{first}", float(predicted[first])) if first in predicted else None,
                (f"measured c{first}", float(measured[first].get("tokens_per_s") or 0.0))
                if first in measured
                else None,
            ]
            groups.append((name, [b for b in bars if b is not None]))
            cells: list[object] = [name]
            for level in levels:
                cells.append(predicted.get(level))
                at = measured.get(level)
                cells.append(at.get("tokens_per_s") if at else None)
            cells.append(tokens_word(row.get("tokens")) or "")
            cells.append(row.get("engine_error") or row.get("error") or "")
            rows.append(cells)
        heads = [h for c in levels for h in (f"predicted c{c}", f"measured c{c}")]
        winner = result.get("winner")
        parts.append(
            f"<h3>{esc(label)}: {esc(result.get('model'))}</h3>"
            + bar_chart(f"tune-{label}", f"tokens/s at concurrency {first}", "tok/s", groups)
            + table(["layout", *heads, "tokens", "note"], rows)
            + f'<p class="note">winner: {esc(winner["reason"] if winner else None)}</p>'
        )
    return "".join(parts)


def run_section(results: Sequence[tuple[str, RunResult]]) -> str:
    """halo run: the layout each run served and why, its tokens/s at concurrency 1
    predicted beside measured, and what the witnesses said."""
    if not results:
        return ""
    groups, rows = [], []
    for label, result in results:
        predicted = result.get("predicted_tokens_per_s")
        measured = result.get("measured_tokens_per_s")
        bars = [
            ("predicted c1", float(predicted)) if isinstance(predicted, (int, float)) else None,
            ("measured c1", float(measured)) if isinstance(measured, (int, float)) else None,
        ]
        groups.append((label, [b for b in bars if b is not None]))
        verdict = (
            "stopped: " + "; ".join(result.get("problems") or [])
            if result.get("stopped")
            else (
                result.get("proven") or ("already serving" if result.get("already_running") else "")
            )
        )
        rows.append(
            [label, result.get("model"), result.get("layout"), result.get("reason"),
             predicted, measured, verdict]
        )  # fmt: skip
    return (
        "<h2>Runs: the layout served, predicted and measured</h2>"
        + bar_chart("run", "tokens/s at concurrency 1", "tok/s", groups)
        + table(["run", "model", "layout", "why", "predicted c1", "measured c1", "proof"], rows)
    )


def stamp_section(results: Sequence[tuple[str, Stamp]]) -> str:
    parts = ["<h2>Plan stamp</h2>"]
    for label, result in results:
        nodes = result.get("nodes") or {}
        parts.append(
            f"<h3>{esc(label)} — {esc(result.get('kind'))}, {esc(result.get('created'))}</h3>"
        )
        if result.get("incomplete"):
            parts.append(f'<p class="warn">incomplete: {esc(result["incomplete"])}</p>')
        rows = [
            [
                name,
                n.get("hostname"),
                n.get("transport"),
                stamp_hca(n),
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
            table(
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
            + esc(", ".join(f"{k} {v}" for k, v in versions.items() if v))
            + f" — from {esc(result.get('host'))}</p>"
        )
    return "".join(parts)
