"""Latency baselines for the ``latency_high`` alert: the latest ``halo bench net`` result.

Result files (schema ``halo.bench.net/1``) live in ``$XDG_DATA_HOME/halo/results/`` (or are
given with ``--baseline FILE``); the part read here is
``{"schema": "halo.bench.net/1", "paths": [{"peer": NAME, "path": "fabric"|"mgmt",
"latency_us": {"p50": …}}]}``. Without one, the exporter takes the first steady p50.

Files are read as a regular file of bounded size (a FIFO or /dev/zero named ``*.json`` is
skipped, never waited on), and a p50 must be a finite positive number."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from halo_cluster.bounded.jsonin import load_file
from halo_cluster.errors import UsageError
from halo_cluster.schema import SCHEMAS

SCHEMA = SCHEMAS["net"]
MAX_RESULT_BYTES = 16 << 20  # a bench net result is a few KiB


def load_baseline(path: Path) -> dict[tuple[str, str], float]:
    """(peer, path) -> p50 seconds."""
    try:
        data = read_result(path)
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema is {data.get('schema')!r}, not {SCHEMA}")
        return {(p["peer"], p["path"]): _p50_s(p["latency_us"]["p50"]) for p in data["paths"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError) as err:
        raise UsageError(f"{path}: not a bench net result usable as a baseline ({err})") from None


def _p50_s(value: Any) -> float:
    seconds = float(value) * 1e-6
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"p50 {value!r} is not a positive number of microseconds")
    return seconds


def read_result(path: Path) -> Any:
    """A result file's JSON, read by the one reader of outside files and JSON (a regular
    file of at most MAX_RESULT_BYTES, opened without waiting; numbers in range, nesting
    bounded): ValueError with the reason for anything else."""
    try:
        return load_file(path, MAX_RESULT_BYTES, "a halo result")
    except UsageError as err:  # the caller names the file: the reason alone
        raise ValueError(str(err).removeprefix(f"{path}: ")) from None


def latest_result(results_dir: Path) -> Path | None:
    """The newest bench net result file, or None (also when there is no directory).
    OSError when the directory is there but cannot be listed."""
    try:
        with os.scandir(results_dir) as entries:
            names = [e.path for e in entries if e.name.endswith(".json")]
    except (FileNotFoundError, NotADirectoryError):
        return None
    stamped = []
    for name in names:
        try:
            stamped.append((os.stat(name).st_mtime, name))
        except OSError:
            continue  # a dangling link, or gone meanwhile
    for _stamp, name in sorted(stamped, reverse=True):
        try:
            data = read_result(Path(name))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("schema") == SCHEMA:
            return Path(name)
    return None
