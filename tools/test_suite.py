"""The test suite's figures, in benchmarks/results/test_suite.json (schema halo.test_suite/1).

  python tools/test_suite.py record RAW.json [--out FILE]    a run of pytest --suite-timing
  python tools/test_suite.py coverage before|after PCT [--out FILE]
  python tools/test_suite.py unit PARALLEL_S SERIAL_S [--out FILE]   make unit, -n 2 and alone
  python tools/test_suite.py table [--out FILE]              the Markdown tables of docs/testing.md

``record`` replaces the timing figures (pytest seconds, tests, tiers, the 20 slowest tests,
seconds per file, per fixture and per kind of halo command) with the run's and adds the run
to ``runs`` (the last ten are kept, to show the budget held run after run); the coverage
figures are kept until ``coverage`` sets them (``make test-coverage`` measures them)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

SCHEMA = "halo.test_suite/1"
RAW_SCHEMA = "halo.test_suite_raw/1"
REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "results" / "test_suite.json"
TIERS = ("unit", "lab", "engine")
KEPT_RUNS = 10


class Refused(Exception):
    """Bad input: one line for the user."""


def seconds_of(test: dict[str, Any]) -> float:
    return float(test.get("setup", 0)) + float(test.get("call", 0)) + float(test.get("teardown", 0))


def commit() -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    head = done.stdout.strip() or "unknown"
    return f"{head}+changes" if dirty else head


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kb = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal:")
        )
    except (OSError, StopIteration, ValueError):
        mem_kb = 0
    return {
        "cpus": os.cpu_count(),
        "cpu": model,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "ci": os.environ.get("CI") == "true",
        "root": os.geteuid() == 0,
    }


def load_raw(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise Refused(f"cannot read {path}: {exc}") from None
    if not isinstance(raw, dict) or raw.get("schema") != RAW_SCHEMA:
        raise Refused(f"{path} is not a pytest --suite-timing file (schema {RAW_SCHEMA})")
    return raw


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    tests = [t for t in raw["tests"] if "call" in t or "setup" in t]
    tiers = {tier: {"tests": 0, "seconds": 0.0} for tier in TIERS}
    files: dict[str, dict[str, Any]] = defaultdict(lambda: {"tests": 0, "seconds": 0.0})
    for test in tests:
        tier = tiers[test.get("tier", "unit")]
        tier["tests"] += 1
        tier["seconds"] += seconds_of(test)
        entry = files[test["file"]]
        entry["tests"] += 1
        entry["seconds"] += seconds_of(test)
        tier_name = test.get("tier", "unit")  # a file's tier: the highest of its tests'
        if TIERS.index(tier_name) >= TIERS.index(entry.get("tier", "unit")):
            entry["tier"] = tier_name
    fixtures: dict[str, dict[str, Any]] = defaultdict(lambda: {"setups": 0, "seconds": 0.0})
    for fixture in raw["fixtures"]:
        entry = fixtures[fixture["fixture"]]
        entry["setups"] += 1
        entry["seconds"] += fixture["seconds"]
        entry["scope"] = fixture["scope"]
    outcomes: dict[str, int] = defaultdict(int)
    for test in tests:
        outcomes[test["outcome"]] += 1
    slowest = sorted(tests, key=seconds_of, reverse=True)[:20]
    return {
        "pytest_seconds": raw["pytest_seconds"],
        "tests": len(tests),
        "outcomes": dict(outcomes),
        "tiers": {
            k: {"tests": v["tests"], "seconds": round(v["seconds"], 1)} for k, v in tiers.items()
        },
        "slowest": [{"test": t["test"], "seconds": round(seconds_of(t), 1)} for t in slowest],
        "files": _ranked(files, "seconds"),
        "fixtures": _ranked(fixtures, "seconds", least=1.0),
        "commands": _ranked(raw["commands"], "seconds"),
    }


def _ranked(table: dict[str, dict[str, Any]], key: str, least: float = 0.0) -> dict[str, Any]:
    rows = sorted(table.items(), key=lambda item: item[1][key], reverse=True)
    return {
        name: {k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}
        for name, row in rows
        if row[key] >= least
    }


def read_out(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"schema": SCHEMA, "coverage": {"before": None, "after": None}, "runs": []}
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise Refused(f"{path} is not JSON ({exc}): fix or remove it") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise Refused(f"{path} is not a {SCHEMA} document: fix or remove it")
    return data


def write_out(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(partial, path)


def record(raw_path: Path, out: Path) -> dict[str, Any]:
    summary = summarize(load_raw(raw_path))
    data = read_out(out)
    data.update(summary)
    data["schema"] = SCHEMA
    data["commit"] = commit()
    data["machine"] = machine()
    data["green"] = (
        summary["outcomes"].get("failed", 0) == 0 and load_raw(raw_path)["exit_status"] == 0
    )
    run = {
        "commit": data["commit"],
        "pytest_seconds": summary["pytest_seconds"],
        "tests": summary["tests"],
        "outcomes": summary["outcomes"],
    }
    data["runs"] = [*data.get("runs", []), run][-KEPT_RUNS:]
    write_out(out, data)
    return data


def set_coverage(which: str, pct: str, out: Path) -> dict[str, Any]:
    try:
        value = float(pct)
    except ValueError:
        raise Refused(f"coverage {pct!r} is not a percentage") from None
    if not 0 <= value <= 100:
        raise Refused(f"coverage {value} is not between 0 and 100")
    data = read_out(out)
    data.setdefault("coverage", {"before": None, "after": None})[which] = round(value, 2)
    data["coverage"][f"{which}_commit"] = commit()
    write_out(out, data)
    return data


def set_unit(parallel_s: str, serial_s: str, out: Path) -> dict[str, Any]:
    """The unit tier's wall time on two workers (make unit) and on one, same clone."""
    try:
        parallel, serial = float(parallel_s), float(serial_s)
    except ValueError:
        raise Refused(f"{parallel_s!r} and {serial_s!r} must be seconds") from None
    if not (parallel > 0 and serial > 0):
        raise Refused("the seconds must be above 0")
    data = read_out(out)
    data["unit_tier"] = {
        "workers_2_seconds": round(parallel, 1),
        "workers_1_seconds": round(serial, 1),
        "speedup": round(serial / parallel, 2),
        "commit": commit(),
    }
    write_out(out, data)
    return data


def table(out: Path) -> str:
    data = read_out(out)
    lines = ["| file | tier | tests | seconds |", "|---|---|---:|---:|"]
    for name, row in list(data.get("files", {}).items())[:25]:
        lines.append(f"| `{name}` | {row['tier']} | {row['tests']} | {row['seconds']:.0f} |")
    lines += ["", "| fixture | scope | set-ups | seconds |", "|---|---|---:|---:|"]
    for name, row in list(data.get("fixtures", {}).items())[:15]:
        lines.append(f"| `{name}` | {row['scope']} | {row['setups']} | {row['seconds']:.0f} |")
    lines += ["", "| halo command | calls | seconds |", "|---|---:|---:|"]
    for name, row in list(data.get("commands", {}).items())[:15]:
        lines.append(f"| `{name}` | {row['calls']} | {row['seconds']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"default {OUT.relative_to(REPO)}")
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="the timing figures of a pytest --suite-timing run")
    rec.add_argument("raw", type=Path)
    cov = sub.add_parser("coverage", help="line coverage of src/halo_cluster, before or after")
    cov.add_argument("which", choices=("before", "after"))
    cov.add_argument("pct")
    unit = sub.add_parser("unit", help="make unit's wall seconds on two workers and on one")
    unit.add_argument("parallel_s")
    unit.add_argument("serial_s")
    sub.add_parser("table", help="print the Markdown tables of docs/testing.md")
    args = parser.parse_args(argv)
    try:
        if args.command == "record":
            data = record(args.raw, args.out)
            tiers = ", ".join(
                f"{k} {v['tests']} in {v['seconds']:.0f} s" for k, v in data["tiers"].items()
            )
            total = f"pytest {data['pytest_seconds']:.0f} s, {data['tests']} tests"
            print(f"{total} ({tiers}): {args.out}")
        elif args.command == "coverage":
            data = set_coverage(args.which, args.pct, args.out)
            print(f"coverage {args.which}: {data['coverage'][args.which]} %: {args.out}")
        elif args.command == "unit":
            data = set_unit(args.parallel_s, args.serial_s, args.out)
            print(f"make unit: {data['unit_tier']['speedup']}x on two workers: {args.out}")
        else:
            print(table(args.out), flush=True)
    except Refused as exc:
        print(f"test_suite: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
