"""Benchmark results: one versioned JSON file per run, stamped, written atomically."""

from __future__ import annotations

import datetime
import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

from halo_cluster import __version__


def stamp(
    result: dict[str, Any],
    plans: dict[str, Any] | None,
    nodes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The run's result plus when, where from, which versions, and every node's plan."""
    stamped = {
        **result,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "versions": {
            "halo": __version__,
            "python": platform.python_version(),
            **result.get("versions", {}),
        },
        "plans": plans or {},
    }
    if nodes is not None:
        stamped["nodes"] = nodes
    return stamped


def save(result: dict[str, Any], out: str | None, results_dir: Path, kind: str) -> Path:
    if out:
        path = Path(out)
    else:
        moment = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
        path = results_dir / f"{kind}-{moment}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".result.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
        handle.write("\n")
    os.replace(tmp, path)
    return path
