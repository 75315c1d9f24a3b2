"""The served model's state as metrics: what the supervisor on this node (the head) wrote
in halo's state directory (``supervise-CLUSTER.json``, ``node/supervisor.py``), read at
every page. Nodes without a supervisor have no such file and show no serving series.

    halo_serve_state{cluster, state}       1 for the state it is in, 0 for the others
    halo_serve_restarts_total{cluster}     restarts that brought it back
    halo_serve_probe_latency_seconds{cluster}  the last one-token generation's time
    halo_serve_probe_ok{cluster}           1 when the last probe generated its token
    halo_serve_supervisor_up{cluster}      1 while the supervisor's process runs
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from halo_cluster.bounded.infile import read_text
from halo_cluster.bounded.jsonin import loads
from halo_cluster.errors import HaloError
from halo_cluster.supervision import STATES

MAX_STATE = 1 << 20
Series = tuple[str, tuple[tuple[str, str], ...], float]


def serving_series(state_dir: str | None) -> tuple[list[Series], list[str]]:
    """(series, problems) from every supervisor state file in ``state_dir``; a file that
    cannot be read is a problem line, never an exception."""
    if not state_dir:
        return [], []
    try:
        paths = sorted(Path(state_dir).glob("supervise-*.json"))
    except OSError as err:
        return [], [f"{state_dir}: {err}"]
    series: list[Series] = []
    problems: list[str] = []
    for path in paths:
        if path.name.endswith(".spec.json"):
            continue
        try:
            data = loads(read_text(path, MAX_STATE, "supervisor state"))
        except (OSError, ValueError, HaloError) as err:
            problems.append(f"{path.name}: {err}")
            continue
        if isinstance(data, dict):
            series += _one(data)
    return series, problems


def _one(data: dict[str, Any]) -> list[Series]:
    cluster = data.get("cluster")
    if not isinstance(cluster, str):
        return []
    labels = (("cluster", cluster),)
    state = data.get("state")
    out: list[Series] = [
        ("halo_serve_state", (*labels, ("state", s)), 1.0 if s == state else 0.0) for s in STATES
    ]
    restarts = data.get("restarts")
    if isinstance(restarts, int) and not isinstance(restarts, bool):
        out.append(("halo_serve_restarts_total", labels, float(restarts)))
    probe = data.get("last_probe")
    if isinstance(probe, dict):
        latency = probe.get("latency_s")
        if isinstance(latency, (int, float)) and not isinstance(latency, bool):
            out.append(("halo_serve_probe_latency_seconds", labels, float(latency)))
        out.append(("halo_serve_probe_ok", labels, 1.0 if probe.get("generated") else 0.0))
    out.append(("halo_serve_supervisor_up", labels, 1.0 if _running(data.get("pid")) else 0.0))
    return out


def _running(pid: Any) -> bool:
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except OSError:
        return False
    return True
