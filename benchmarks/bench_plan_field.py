"""halo plan against the field: every published Strix Halo decode measurement of the field
table (src/halo_cluster/capacity/data/field.json) next to the planner's prediction, with the
error of each and the median/worst per role (calibration rows derive the engine
efficiencies; holdout rows are measurements the planner has not seen).

    .venv/bin/python benchmarks/bench_plan_field.py            # table + results JSON
    .venv/bin/python benchmarks/bench_plan_field.py --fit      # refit the fixed costs

``--fit`` searches each engine's fixed costs (per layer, per gated delta-net layer) on a grid
by leave-one-out: every calibration row is predicted from efficiencies derived without it;
the pair with the smallest median + worst error wins. It prints the values to put in
capacity/data/engines/*.json and writes nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from halo_cluster.capacity import field
from halo_cluster.capacity.engines import Engine, find_engine

RESULTS = Path(__file__).parent / "results" / "plan_field.json"
TARGET_MEDIAN, TARGET_WORST = 0.15, 0.30
GRIDS = {
    "llama.cpp": (range(0, 161, 10), range(0, 701, 25)),
    "vllm": (range(0, 801, 20), range(0, 1601, 50)),
}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [abs(r["error"]) for r in rows]
    if not errors:
        return {"rows": 0}
    median, worst = statistics.median(errors), max(errors)
    return {
        "rows": len(errors),
        "median_abs_error": round(median, 4),
        "worst_abs_error": round(worst, 4),
        "meets_target": median <= TARGET_MEDIAN and worst <= TARGET_WORST,
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = f"{'role':5} {'row':34} {'engine':9} {'n':>1} {'layout':6} {'published':>9} "
    head += f"{'predicted':>9} {'range':>15} {'error':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        span = f"{r['low']:.2f}-{r['high']:.2f}"
        lines.append(
            f"{r['role'][:5]:5} {r['id']:34} {r['engine']:9} {r['nodes']:>1} {r['layout']:6} "
            f"{r['published']:9.2f} {r['predicted']:9.2f} {span:>15} {r['error']:+7.1%}"
        )
    return "\n".join(lines)


def engine_at(engine_id: str, per_layer: float, per_linear: float, exclude: str = "") -> Engine:
    """The engine with these fixed costs and the efficiencies its calibration rows imply
    (without row ``exclude``)."""
    engine = field.with_fixed(find_engine(engine_id), per_layer, per_linear)
    derived = field.derive(engine_id, per_layer, per_linear, exclude=exclude)
    tuning = engine.tunings[field.HARDWARE]
    tuning = replace(tuning, dense=derived["dense"], moe=derived["moe"])
    return replace(engine, tunings={**engine.tunings, field.HARDWARE: tuning})


def leave_one_out(engine_id: str, per_layer: float, per_linear: float) -> float:
    errors = []
    for row in field.rows():
        if row.engine == engine_id and row.role == "calibration":
            engine = engine_at(engine_id, per_layer, per_linear, exclude=row.id)
            errors.append(abs(field.predict(row, engine)["error"]))
    return statistics.median(errors) + max(errors)


def fit(only: str | None) -> int:
    for engine_id, (layers, linear) in GRIDS.items():
        if only and engine_id != only:
            continue
        best = min(
            itertools.product(layers, linear),
            key=lambda pair: leave_one_out(engine_id, pair[0], pair[1]),
        )
        derived = field.derive(engine_id, best[0], best[1])
        print(
            json.dumps(
                {
                    "engine": engine_id,
                    "per_layer_us": best[0],
                    "per_linear_layer_us": best[1],
                    "leave_one_out_median_plus_worst": round(leave_one_out(engine_id, *best), 4),
                    **{k: vars(v) for k, v in derived.items()},
                },
                indent=2,
            )
        )
    return 0


def stored_matches_derivation() -> list[str]:
    """Engines whose stored efficiencies differ from what their calibration rows imply."""
    stale = []
    for engine_id in ("llama.cpp", "vllm"):
        tuning = find_engine(engine_id).tunings[field.HARDWARE]
        derived = field.derive(engine_id, tuning.per_layer_us, tuning.per_linear_layer_us)
        for kind, eff in (("dense", tuning.dense), ("moe", tuning.moe)):
            ours = derived[kind]
            if (eff.central, eff.low, eff.high) != (ours.central, ours.low, ours.high):
                stale.append(f"{engine_id} {kind}: stored {eff.central}, derived {ours.central}")
    return stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fit", action="store_true", help="refit the engines' fixed costs")
    parser.add_argument("--engine", help="with --fit: only this engine")
    parser.add_argument("--out", default=str(RESULTS), help="results JSON (default: %(default)s)")
    args = parser.parse_args()
    if args.fit:
        return fit(args.engine)
    rows = [field.predict(row) for row in field.rows()]
    print(table(rows))
    result = {
        "schema": "halo.bench.plan-field/1",
        "targets": {"median_abs_error": TARGET_MEDIAN, "worst_abs_error": TARGET_WORST},
        "summary": {
            "calibration": summary([r for r in rows if r["role"] == "calibration"]),
            "holdout": summary([r for r in rows if r["role"] == "holdout"]),
            "all": summary(rows),
        },
        "stale_engine_data": stored_matches_derivation(),
        "rows": rows,
    }
    for name, numbers in result["summary"].items():
        print(f"{name}: {numbers}")
    for line in result["stale_engine_data"]:
        print(f"stale: {line}", file=sys.stderr)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
