"""Latency baselines for the ``latency_high`` alert: the latest ``halo bench net`` result.

Result files (schema ``halo.bench.net/1``) live in ``$XDG_DATA_HOME/halo/results/`` (or are
given with ``--baseline FILE``); the part read here is
``{"schema": "halo.bench.net/1", "paths": [{"peer": NAME, "path": "fabric"|"mgmt",
"latency_us": {"p50": …}}]}``. Without one, the exporter takes the first steady p50."""

from __future__ import annotations

import json
from pathlib import Path

from halo_cluster.errors import UsageError
from halo_cluster.schema import SCHEMAS

SCHEMA = SCHEMAS["net"]


def load_baseline(path: Path) -> dict[tuple[str, str], float]:
    """(peer, path) -> p50 seconds."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema is {data.get('schema')!r}, not {SCHEMA}")
        return {(p["peer"], p["path"]): float(p["latency_us"]["p50"]) * 1e-6 for p in data["paths"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise UsageError(f"{path}: not a bench net result usable as a baseline ({err})") from None


def latest_result(results_dir: Path) -> Path | None:
    """The newest bench net result file, or None."""
    newest: tuple[float, Path] | None = None
    for path in results_dir.glob("*.json"):
        try:
            if json.loads(path.read_text(encoding="utf-8")).get("schema") != SCHEMA:
                continue
        except (OSError, ValueError, AttributeError):
            continue
        stamp = path.stat().st_mtime
        if newest is None or stamp > newest[0]:
            newest = (stamp, path)
    return newest[1] if newest else None
