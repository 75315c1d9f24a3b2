"""How ``halo bench`` and ``halo results show`` print a benchmark result: one Rich table per
kind (serve, net, collective, tp), and the one line of a run that ended early."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import click

from halo_cluster.cli.output import table
from halo_cluster.printable import printable


def serve_table(result: Mapping[str, object], where: str) -> None:
    from halo_cluster.cli.output import console

    def pp(d: dict[str, float | None]) -> str:
        return f"{d['p50'] or 0:.1f} / {d['p99'] or 0:.1f}"

    grid = table(
        f"{result['model']} at {where}",
        "conc.",
        "requests",
        "errors",
        "TTFT p50/p99 ms",
        "ITL p50/p99 ms",
        "TPOT p50/p99 ms",
        "e2e p50/p99 ms",
        "output tok/s",
    )
    levels = result["levels"]
    assert isinstance(levels, list)
    for level in levels:
        rate = level["output_tokens_per_s"]
        grid.add_row(
            str(level["concurrency"]),
            str(level["requests"]),
            str(level["errors"]),
            pp(level["ttft_ms"]),
            pp(level["itl_ms"]),
            pp(level["tpot_ms"]),
            pp(level["e2e_ms"]),
            f"{rate:.1f}" if rate is not None else "-",
        )
        if level["first_error"]:
            first = printable(level["first_error"])  # the server's words
            click.echo(f"concurrency {level['concurrency']}: {first}", err=True)
    console().print(grid)
    if result.get("tokens_from") == "chunks":
        click.echo("the server reported no usage: output tokens are counted chunks", err=True)


def _lat(lat: dict[str, object]) -> str:
    p99 = lat.get("p99")
    tail = f"{p99:.1f}" if isinstance(p99, float) else "-"
    return f"{lat['p50']:.1f} / {tail} ({lat['tool']})"


def _rows(result: dict[str, object], key: str) -> list[dict[str, Any]]:
    """The list of row objects a result holds under ``key``."""
    rows = result[key]
    assert isinstance(rows, list)
    return rows


def _print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """A table of ``columns``, one row of cells each, printed."""
    from halo_cluster.cli.output import console

    grid = table(title, *columns)
    for cells in rows:
        grid.add_row(*cells)
    console().print(grid)


def _net_row(p: dict[str, Any]) -> list[str]:
    lat = p.get("latency_us")
    bw = p.get("bandwidth_gbps")
    line, pcie = p.get("pct_line_rate"), p.get("pct_pcie")
    path = p["path"]
    if p.get("cable"):
        path = f"link {p['cable']}"
    elif p.get("hops"):
        path = f"{path} ({p['hops']} hop{'s' if p['hops'] > 1 else ''})"
    return [
        f"{p['node']} → {p['peer']}",
        path,
        _lat(lat) if lat else "[red]failed[/]",
        f"{bw:.2f} ({p.get('bandwidth_tool')})" if bw is not None else "-",
        f"{line:.0f}" if line is not None else "-",
        f"{pcie:.0f}" if pcie is not None else "-",
    ]


def net_table(result: dict[str, object]) -> None:
    paths = _rows(result, "paths")
    _print_table(
        "Fabric question: latency one way, bandwidth",
        ("pair", "path", "latency p50 / p99 µs", "bandwidth Gb/s", "% line", "% PCIe"),
        map(_net_row, paths),
    )
    names = {"mgmt": "Ethernet (mgmt)", "fabric": "fabric TCP", "link": "cable", "rdma": "RDMA"}
    summary = [
        f"{names[p['path']]} {p['latency_us']['p50']:.1f} µs" for p in paths if p.get("latency_us")
    ]
    if summary:
        click.echo(" / ".join(summary))
    for p in paths:
        for error in p.get("errors", []):
            click.echo(printable(f"{p['node']} → {p['peer']} {p['path']}: {error}"), err=True)
    for skip in result.get("skipped", []):  # type: ignore[attr-defined]
        line = f"skipped {skip['path']} for {skip['pair']}: {skip['reason']}"
        click.echo(printable(line), err=True)


def collective_table(result: dict[str, object]) -> None:
    from halo_cluster.units import human_bytes

    transport = result.get("transport") or {}
    assert isinstance(transport, dict)
    rows = _rows(result, "sweep")
    _print_table(
        f"all-reduce, {result.get('world_size', '?')} ranks, {result.get('backend', '?')}"
        f" ({transport.get('transport')})",
        ("size", "time µs", "algbw GB/s", "busbw GB/s"),
        (
            [
                human_bytes(row["bytes"]),
                f"{row['time_us']:.1f}",
                f"{row['algbw_gbs']:.3f}",
                f"{row['busbw_gbs']:.3f}",
            ]
            for row in rows
        ),
    )
    fit = result.get("fit")
    if not fit and len(rows) > 1:
        click.echo(
            "fit: not determined (time does not grow with size over this sweep;"
            " include larger sizes)"
        )
    if isinstance(fit, dict):
        worst = fit.get("max_rel_error")
        click.echo(
            f"fit: α = {fit['alpha_us']:.2f} µs per step, β = {fit['beta_gbps']:.2f} Gb/s"
            + (f" (worst point off by {worst * 100:.0f} %)" if worst is not None else "")
        )


def tp_table(result: dict[str, object]) -> None:
    model = result.get("model") or {}
    assert isinstance(model, dict)
    _print_table(
        f"{model.get('name')}: decode-step network replay on {result.get('world_size', '?')}"
        f" ranks ({result.get('backend', '?')})",
        ("batch", "all-reduces / token", "bytes each", "network ms / token", "ceiling tok/s"),
        (
            [
                str(row["batch"]),
                str(row["allreduces_per_token"]),
                str(row["bytes_per_allreduce"]),
                f"{row['network_ms_per_token']:.3f}",
                f"{row.get('tokens_per_s_ceiling') or 0:.0f}",
            ]
            for row in _rows(result, "rows")
        ),
    )


def fail(failure: BaseException, saved: str | None) -> int:
    """One line for a run that ended early; 130 for Ctrl-C, 1 otherwise."""
    kept = f"; partial result kept in {saved}" if saved else ""
    if isinstance(failure, KeyboardInterrupt):
        from halo_cluster.errors import EXIT_CODES

        click.echo(f"halo: interrupted; remote tools stopped{kept}", err=True)
        return EXIT_CODES[KeyboardInterrupt]
    click.echo(f"halo: error: {printable(failure)}{kept}", err=True)
    return 1
