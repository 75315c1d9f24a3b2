"""A ``halo bench serve`` result (schema halo.bench.serve/1) as a calibration point: the
decode speed one node reached at concurrency 1 (``levels[].output_tokens_per_s``), and the
spread of its inter-token latencies (p50, p90) for the estimate's low/high range."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halo_cluster.capacity.hf_config import read_json_object
from halo_cluster.errors import UsageError
from halo_cluster.schema import SCHEMAS, require_kind

SERVE_SCHEMA = SCHEMAS["serve"]  # what `halo bench serve` writes (bench/serve_load.py)


@dataclass(frozen=True)
class Calibration:
    path: str
    created: str
    model: str
    tokens_per_s: float  # output tokens/s at concurrency 1
    tokens_per_s_low: float  # from the p90 inter-token latency
    tokens_per_s_high: float  # from the p50 inter-token latency
    input_len: int
    output_len: int

    @property
    def label(self) -> str:
        return f"calibrated from {Path(self.path).name} ({self.created}, {self.model})"

    @property
    def context(self) -> int:
        """The estimate's context whose average (half of it) is the measurement's average context,
        input_len + output_len / 2."""
        return 2 * self.input_len + self.output_len


def _positive(path: Path, where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{path}: {where} must be a finite number, got {value!r}")
    if value <= 0:
        raise UsageError(f"{path}: {where} must be > 0, got {value!r}")
    return float(value)


def _level(path: Path, data: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    levels = data.get("levels")
    if not isinstance(levels, list) or not levels:
        raise UsageError(f"{path}: levels must be a non-empty list of concurrency levels")
    for index, level in enumerate(levels):
        if isinstance(level, dict) and level.get("concurrency") == 1:
            return index, level
    raise UsageError(
        f"{path}: no levels[] entry with concurrency 1; run halo bench serve --concurrency 1"
    )


def _itl_rate(level: dict[str, Any], key: str, default: float) -> float:
    """Tokens/s from an inter-token latency percentile (ms); the default when absent."""
    itl = level.get("itl_ms")
    value = itl.get(key) if isinstance(itl, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return 1000.0 / value if math.isfinite(value) and value > 0 else default


def read_serve_result(path: Path) -> Calibration:
    data = read_json_object(path, "a halo bench serve result")
    require_kind(data, "serve", path)
    plans = data.get("plans")
    if isinstance(plans, dict) and len(plans) > 1:
        raise UsageError(
            f"{path}: plans names {len(plans)} nodes; --calibrate needs a one-node measurement"
        )
    index, level = _level(path, data)
    rate = _positive(path, f"levels[{index}].output_tokens_per_s", level.get("output_tokens_per_s"))
    errors = level.get("errors")
    if errors is not None and (isinstance(errors, bool) or not isinstance(errors, int)):
        raise UsageError(f"{path}: levels[{index}].errors must be a whole number")
    if errors:
        raise UsageError(f"{path}: levels[{index}] had {errors} failed requests")
    lengths = [data.get("input_len"), data.get("output_len")]
    for key, value in zip(("input_len", "output_len"), lengths, strict=True):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise UsageError(f"{path}: {key} must be a whole number >= 0, got {value!r}")
    slow = min(rate, _itl_rate(level, "p90", rate))
    fast = max(rate, _itl_rate(level, "p50", rate))
    return Calibration(
        path=str(path),
        created=str(data.get("created") or "undated")[:64],  # shown in the plan's header
        model=str(data.get("model") or "unnamed model")[:200],
        tokens_per_s=rate,
        tokens_per_s_low=slow,
        tokens_per_s_high=fast,
        input_len=int(data["input_len"]),
        output_len=int(data["output_len"]),
    )
