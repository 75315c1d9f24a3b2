"""Benchmark results: one versioned JSON file per run, stamped, written atomically."""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path
from typing import Any

from halo_cluster import __version__
from halo_cluster.atomic import write_new, write_output
from halo_cluster.bounded.jsonin import load_file
from halo_cluster.bounded.redact import redact_url
from halo_cluster.errors import UsageError
from halo_cluster.schema import VERSIONS, check_result, result_kind


def stamp(
    result: dict[str, Any],
    plans: dict[str, Any] | None,
    nodes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The run's result plus when, where from, which versions, and every node's plan (a
    URL it names with its credentials redacted: a result file keeps no secret)."""
    stamped = {
        **result,
        **({"url": redact_url(result["url"])} if isinstance(result.get("url"), str) else {}),
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


MAX_SAME_SECOND = 1000


def save(result: dict[str, Any], out: str | None, results_dir: Path, kind: str) -> Path:
    """Write ``result`` to ``out`` (a file someone named: replaced), else to a new file in
    ``results_dir`` named by kind and second, ``KIND-YYYYmmddTHHMMSS.json``; a name taken
    (another run saved in that second) gets ``-2``, ``-3``…: never an overwrite."""
    text = json.dumps(result, indent=2, allow_nan=False) + "\n"
    if out:
        write_file(Path(out), text)
        return Path(out)
    moment = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
    path = results_dir
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
        for count in range(1, MAX_SAME_SECOND + 1):
            path = results_dir / (
                f"{kind}-{moment}.json" if count == 1 else f"{kind}-{moment}-{count}.json"
            )
            try:
                write_new(path, text)
            except FileExistsError:
                continue
            return path
    except OSError as err:
        raise UsageError(f"cannot write {path}: {err.strerror or err}") from None
    raise UsageError(f"{results_dir}: {MAX_SAME_SECOND} results of {kind} saved in one second?")


def write_file(path: Path, text: str, mode: int = 0o644) -> bool:
    """Write ``text`` to ``path`` someone named (atomic.py ``write_output``): a regular file
    replaced atomically, readable ``mode``; a link written through, never replaced; anything
    else (a device, a FIFO, a directory) refused in one line. True when it was this
    process's standard output (then what is printed next goes to stderr)."""
    return write_output(path, text, mode)


# the result schemas this halo reads: kind -> version (see schema.py)
KNOWN_SCHEMAS = VERSIONS
MAX_RESULT_BYTES = 64 << 20


def load(path: Path) -> dict[str, Any]:
    """A result file; UsageError (one line naming the file) when it is not a readable halo
    result of a schema this halo knows (``halo.bench.<kind>/<version>``) whose every field
    has its type (schema.py ``check_result``): not a regular file, over 64 MiB, not JSON,
    numbers JSON does not allow or out of range, nested too deep, or of the wrong shape."""
    data = load_file(path, MAX_RESULT_BYTES, "a halo result")
    check_result(data, path)
    result: dict[str, Any] = data
    return result


def listing(directory: Path) -> list[dict[str, Any]]:
    """Every result in ``directory``, oldest first, with a one-line summary; unreadable files
    are listed with the reason instead of a summary."""
    rows: list[dict[str, Any]] = []
    try:
        found = [(p.stat().st_mtime, p.name, p) for p in directory.glob("*.json")]
    except OSError as err:
        raise UsageError(f"cannot read the results directory {directory}: {err.strerror}") from None
    if directory.exists() and not os.access(directory, os.R_OK | os.X_OK):
        raise UsageError(f"cannot read the results directory {directory}: permission denied")
    for _mtime, _name, path in sorted(found):
        try:
            data = load(path)
        except UsageError as err:
            rows.append({"id": path.stem, "path": str(path), "error": str(err).split(": ", 1)[-1]})
            continue
        rows.append(
            {
                "id": path.stem,
                "path": str(path),
                "schema": data.get("schema"),
                "kind": result_kind(data, path),
                "created": data.get("created"),
                "incomplete": data.get("incomplete"),
                "summary": summary(data),
            }
        )
    return rows


def resolve(ref: str, directory: Path) -> Path:
    """A file path, an id (file stem) or unique id prefix in the results directory, or
    ``latest`` / ``latest:KIND``."""
    given = Path(ref)
    if given.is_file():
        return given
    if given.exists():
        raise UsageError(f"{ref}: not a regular file")
    if "/" in ref or ref.startswith("."):
        raise UsageError(f"no result file {ref}")
    if ref == "latest" or ref.startswith("latest:"):
        kind = ref.partition(":")[2]
        rows = [r for r in listing(directory) if "error" not in r and kind in ("", r["kind"])]
        if not rows:
            raise UsageError(f"no {kind + ' ' if kind else ''}results in {directory}")
        return Path(rows[-1]["path"])
    candidates = sorted(directory.glob(f"{ref.removesuffix('.json')}*.json"))
    exact = [p for p in candidates if p.stem == ref.removesuffix(".json")]
    if exact:
        return exact[0]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise UsageError(f"no result {ref!r} (see 'halo results list'; looked in {directory})")
    raise UsageError(f"{ref!r} matches {len(candidates)} results; give more of the id")


def _rate(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) else "-"


def summary(data: dict[str, Any]) -> str:
    kind = data.get("kind")
    try:
        if kind == "net":
            parts = [
                f"{p['path']} {p['latency_us']['p50']:.1f} µs"
                + (f" {p['bandwidth_gbps']:.1f} Gb/s" if p.get("bandwidth_gbps") else "")
                for p in data.get("paths", [])
                if p.get("latency_us")
            ]
            return "; ".join(parts) or "no path measured"
        if kind == "collective":
            fit = data.get("fit") or {}
            sweep = data.get("sweep", [])
            span = f"{sweep[0]['bytes']}..{sweep[-1]['bytes']} B" if sweep else "no sizes"
            alpha = f", α {fit['alpha_us']:.1f} µs β {fit['beta_gbps']:.1f} Gb/s" if fit else ""
            transport = (data.get("transport") or {}).get("transport")
            return (
                f"{data.get('world_size')} ranks {data.get('backend')} ({transport}), {span}{alpha}"
            )
        if kind == "tp":
            rows = ", ".join(
                f"b{r['batch']} {r['network_ms_per_token']:.2f} ms" for r in data.get("rows", [])
            )
            return f"{(data.get('model') or {}).get('id')}: {rows}"
        if kind == "serve" or str(data.get("schema", "")).startswith("halo.bench.serve"):
            levels = ", ".join(
                f"c{lv['concurrency']} {lv['output_tokens_per_s']:.0f} tok/s"
                for lv in data.get("levels", [])
            )
            return f"{data.get('model')}: {levels}"
        if kind == "run":
            predicted, measured = (data.get(f"{k}_tokens_per_s") for k in ("predicted", "measured"))
            said = (
                "stopped by its witnesses"
                if data.get("stopped")
                else (f"{_rate(measured)} tok/s measured, {_rate(predicted)} predicted")
            )
            return f"{data.get('model')}: {data.get('layout')}, {said}"
        if kind == "tune":
            winner = data.get("winner") or {}
            rows = data.get("rows", [])
            failed = sum(1 for r in rows if r.get("error"))
            return (
                f"{data.get('model')}: {len(rows)} layouts ({failed} failed), winner "
                f"{winner.get('layout') or 'none'} ({data.get('objective')})"
            )
    except (KeyError, TypeError, ValueError, IndexError):
        return "unreadable result body"
    return str(data.get("schema"))
