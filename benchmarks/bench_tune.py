"""The planner's predicted tokens/s against 'halo tune''s measurement, on a 4-node lab with
the tiny model (both engines: every layout 'halo tune --layouts auto' runs). Needs root,
the engine environment and the llama.cpp build. Writes benchmarks/results/tune.json.

    sudo .venv/bin/python benchmarks/bench_tune.py [--nodes 4] [--runs 1] [--concurrency 1,4]

Per run: a fresh lab, 'halo lab profile' when this machine has no profile yet (the lab's
hardware and link for the planner), then 'halo tune MODEL --json'. Per concurrency level,
over the layouts that have both a prediction and a measurement: Spearman's rank
correlation of predicted against measured tokens/s (the planner's ranking of the layouts
against the truth; the target is 0.8 or more), and the median of |predicted / measured - 1|
(its error in size). The peer is the measurement itself: the same layouts, the same
engines, run for real.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HALO = str(Path(sys.executable).parent / "halo")
NAME = "btune"


def sh(argv: list[str], timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv[:3])}: exit {done.returncode}: {done.stderr[-800:]}")
    return done


def ranks(values: list[float]) -> list[float]:
    """Average ranks (ties share theirs)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return round(num / den, 3) if den else None


def agreement(doc: dict[str, Any]) -> dict[str, Any]:
    """Per level: the layouts compared, Spearman's rho, the median relative error."""
    out: dict[str, Any] = {}
    for level in (str(c) for c in doc["concurrency"]):
        pairs = []
        for row in doc["rows"]:
            predicted = (row.get("predicted_tokens_per_s") or {}).get(level)
            measured = ((row.get("measured") or {}).get(level) or {}).get("tokens_per_s")
            if predicted and measured:
                pairs.append((row["layout"]["name"], predicted, measured))
        out[level] = {
            "layouts": [p[0] for p in pairs],
            "predicted": [p[1] for p in pairs],
            "measured": [p[2] for p in pairs],
            "spearman": spearman([p[1] for p in pairs], [p[2] for p in pairs]),
            "median_error": round(statistics.median(abs(p / m - 1) for _, p, m in pairs), 3)
            if pairs
            else None,
        }
    return out


def one_run(nodes: int, concurrency: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as cwd:
        lab = Path(cwd) / "lab"
        sh([HALO, "lab", "up", "--nodes", str(nodes), "--name", NAME, "--dir", str(lab)])
        try:
            sh([HALO, "lab", "model", str(lab / "model"), "--format", "both"])
            tuned = sh(
                [HALO, "tune", str(lab / "model"), "--config", str(lab / "halo.toml"),
                 "--concurrency", concurrency, "--json", "--out", str(Path(cwd) / "tune.json")]
            )  # fmt: skip
            doc = json.loads(tuned.stdout)
        finally:
            sh([HALO, "stop", "--config", str(lab / "halo.toml")])
            sh([HALO, "lab", "down", "--name", NAME, "--dir", str(lab)])
    rows = [
        {k: row.get(k) for k in ("layout", "predicted_tokens_per_s", "measured", "tokens", "error",
                                 "engine_error", "seconds")}
        for row in doc["rows"]
    ]  # fmt: skip
    return {"winner": doc["winner"], "planner": doc["planner"], "rows": rows,
            "agreement": agreement(doc)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--append", action="store_true", help="Add the runs to the results file.")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the lab needs root")
    profile = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local/share"))
    if not (profile / "halo" / "hardware" / "lab.json").is_file():
        sh([HALO, "lab", "profile"])
    out = HERE / "results" / "tune.json"
    runs = json.loads(out.read_text())["runs"] if args.append and out.is_file() else []
    for index in range(args.runs):
        print(f"run {index + 1} of {args.runs}", file=sys.stderr)
        runs.append(one_run(args.nodes, args.concurrency))
    result = {
        "benchmark": "tune",
        "nodes": args.nodes,
        "concurrency": args.concurrency,
        "machine": {"cores": os.cpu_count()},
        "runs": runs,
    }
    result["summary"] = {
        level: {
            "spearman": [run["agreement"][level]["spearman"] for run in runs],
            "median_error": [run["agreement"][level]["median_error"] for run in runs],
        }
        for level in runs[0]["agreement"]
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    for run in runs:
        for level, found in run["agreement"].items():
            print(f"concurrency {level}: spearman {found['spearman']}, median error "
                  f"{found['median_error']} over {len(found['layouts'])} layouts")  # fmt: skip
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
