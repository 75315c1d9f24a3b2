"""The report's energy section: joules per output token for every measured window of the
results given (each level of ``halo bench serve``, each layout and level of ``halo tune``,
``halo run``'s layout), "no power source" where no node had one (never a number), and the
watts of each node over a window where it was sampled."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from halo_cluster.facts.energy import NO_SOURCE
from halo_cluster.report.svg import table, time_chart
from halo_cluster.schema import WindowEnergy


def windows(result: dict[str, Any]) -> list[tuple[str, WindowEnergy | None]]:
    """Every timed window of a result that says whether its energy was measured: what it
    was, and its energy (None: not measured, no nodes known). Results written before energy
    was measured have none."""
    kind = result.get("kind")
    if kind == "serve":
        return [
            (f"concurrency {level.get('concurrency')}", level["energy"])
            for level in result.get("levels", [])
            if "energy" in level
        ]
    if kind == "tune":
        return [
            (f"{row['layout']['name']} c{level}", rate["energy"])
            for row in result.get("rows", [])
            for level, rate in (row.get("measured") or {}).items()
            if "energy" in rate
        ]
    if kind == "run" and result.get("energy") is not None:
        return [(f"{result.get('layout')} c1", result["energy"])]
    return []


def per_token(energy: WindowEnergy | None) -> str:
    """The joules per output token, or why there is no number."""
    if energy is None:
        return "not measured (no nodes known)"
    found = energy.get("joules_per_token")
    if found is not None:
        return f"{found:.4g}"
    problems = {n.get("problem") or "no number" for n in energy["nodes"]}
    if problems <= {NO_SOURCE}:
        return NO_SOURCE
    return "not measured: " + "; ".join(
        f"{n.get('node')}: {n.get('problem')}" for n in energy["nodes"] if n.get("problem")
    )


def energy_section(results: Sequence[tuple[str, dict[str, Any]]]) -> str:
    rows, charts = [], []
    for label, result in results:
        for what, energy in windows(result):
            rows.append(
                [label, result.get("kind"), what, per_token(energy),
                 energy.get("joules") if energy else None,
                 energy["coverage"] if energy else None]
            )  # fmt: skip
            watts = energy.get("watts", {}) if energy else {}
            series = [
                (node, [(p[0], p[1]) for p in points if len(p) == 2])
                for node, points in watts.items()
            ]
            series = [(node, points) for node, points in series if points]
            if series:
                chart = f"watts-{label}-{what}"
                charts.append(time_chart(chart, f"{label}, {what}: watts per node", "W", series))
    if not rows:
        return ""
    return (
        "<h2>Energy per output token</h2>"
        + table(["result", "kind", "window", "J / token", "joules", "coverage"], rows)
        + "".join(charts)
        + '<p class="note">Each node read at the start and the end of the timed window and '
        "about once a second in between; a node without a power source is said so, never "
        "counted. J / token: the cluster's joules over the window / its output tokens.</p>"
    )
