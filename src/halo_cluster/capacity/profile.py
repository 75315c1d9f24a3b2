"""A hardware profile halo measured on this machine (``halo lab profile``), and the
arithmetic that turns its measurements into the planner's figures (pure).

The lab runs every node on one machine, so its hardware is this machine's: the memory
bandwidth one engine thread reads at, the cores the nodes share, no GPU. Per engine, the
one-node run gives the cost per layer (what a decode step takes beyond reading its bytes),
and a second run on the same node through the engine's own transport over loopback gives
the fixed cost of a stage (llama.cpp RPC: one rpc-server) beyond its round trips and bytes.
Nothing here is tuned to a multi-node run: those are what the profile predicts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from halo_cluster.capacity.spec import Hardware, Link
from halo_cluster.errors import UsageError
from halo_cluster.jsonout import JsonObject

SCHEMA = "halo.hardware-profile/1"
PROFILE_ID = "lab"


@dataclass(frozen=True)
class EngineRun:
    """One engine's runs on one node: decode seconds per token alone, and through one
    stage of its transport over loopback (None when not measured)."""

    engine: str
    token_s: float
    staged_token_s: float | None
    read_bytes: float  # what one decode step of the model reads
    layers: int
    stage_wire_s: float  # the stage's round trips and bytes over loopback, as modelled
    source: str
    # the same stage with its worker on the head's own core (None when not measured)
    shared_core_token_s: float | None = None


def engine_figures(run: EngineRun, bandwidth_gbs: float) -> JsonObject:
    """The run as the planner's tuning (the engine data files' shape): the bandwidth at
    full share, the rest of a token's time spread over its layers, and the stage's cost
    beyond its wire time."""
    read_s = run.read_bytes / (bandwidth_gbs * 1e9)
    per_layer_us = max(0.0, (run.token_s - read_s) / run.layers * 1e6)
    share: JsonObject = {"efficiency": 1.0, "low": 1.0, "high": 1.0, "source": run.source}
    figures: JsonObject = {
        "per_layer_us": round(per_layer_us, 2),
        "per_linear_layer_us": 0.0,
        "dense": share,
        "moe": share,
        "source": run.source,
    }
    if run.staged_token_s is not None:
        stage = max(0.0, run.staged_token_s - run.token_s - run.stage_wire_s)
        figures["per_stage_us"] = {"tcp": round(stage * 1e6, 2)}
    if run.shared_core_token_s is not None:
        shared = max(0.0, run.shared_core_token_s - run.token_s - run.stage_wire_s)
        figures["per_stage_shared_core_us"] = round(shared * 1e6, 2)
    return figures


def parse_llama_bench(text: str) -> float:
    """Decode tokens/s of a ``llama-bench -o json`` run of one tg test (its ``avg_ts``)."""
    import json

    try:
        tests = json.loads(text)
    except ValueError:
        raise UsageError("llama-bench printed no JSON") from None
    rates = [
        t.get("avg_ts")
        for t in tests
        if isinstance(t, dict) and t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0
    ] if isinstance(tests, list) else []  # fmt: skip
    if len(rates) != 1 or isinstance(rates[0], bool) or not isinstance(rates[0], (int, float)):
        raise UsageError("llama-bench's JSON holds no single tg test with avg_ts")
    rate = float(rates[0])
    if not math.isfinite(rate) or rate <= 0:
        raise UsageError(f"llama-bench's avg_ts is not a rate: {rate!r}")
    return rate


def hardware_from_profile(data: dict[str, Any], origin: str) -> Hardware:
    """The profile document as a Hardware (one line naming the field when it is not one)."""
    if data.get("schema") != SCHEMA:
        raise UsageError(f"{origin}: not a hardware profile (schema {SCHEMA})")
    memory = _number(data, "memory_gib", origin)
    bandwidth = _number(data, "memory_bw_gbs", origin)
    if memory <= 0 or bandwidth <= 0:
        raise UsageError(f"{origin}: memory_gib and memory_bw_gbs must be > 0")
    cores = data.get("shared_cores", 0)
    engines = data.get("engines")
    if not isinstance(cores, int) or isinstance(cores, bool) or not 0 <= cores <= 4096:
        raise UsageError(f"{origin}: shared_cores must be a whole number from 0 to 4096")
    if not isinstance(engines, dict) or not all(isinstance(v, dict) for v in engines.values()):
        raise UsageError(f"{origin}: engines must map an engine to its figures")
    for name, figures in engines.items():
        for key in ("per_layer_us", "per_linear_layer_us"):
            _number(figures, key, f"{origin}: engines.{name}")
        for kind in ("dense", "moe"):
            share = figures.get(kind)
            if not isinstance(share, dict):
                raise UsageError(f"{origin}: engines.{name}.{kind} is missing")
            for key in ("efficiency", "low", "high"):
                _number(share, key, f"{origin}: engines.{name}.{kind}")
        for key in ("per_collective_us", "per_stage_shared_core_us"):
            if key in figures:
                _number(figures, key, f"{origin}: engines.{name}")
        waits = figures.get("shared_core_allreduce_us", {})
        where = f"{origin}: engines.{name}.shared_core_allreduce_us"
        if not isinstance(waits, dict):
            raise UsageError(f"{where} must map a rank count to µs")
        for ranks in waits:
            canonical = ranks.isascii() and ranks.isdigit() and ranks == str(int(ranks))
            if not (canonical and 2 <= int(ranks) <= 4096):
                raise UsageError(f"{where}: {ranks!r} is not a rank count from 2 to 4096")
            _number(waits, ranks, where)
        stages = figures.get("per_stage_us", {})
        if not isinstance(stages, dict):
            raise UsageError(f"{origin}: engines.{name}.per_stage_us must map a stack to µs")
        for stack in stages:
            _number(stages, stack, f"{origin}: engines.{name}.per_stage_us")
    return Hardware(
        id=str(data.get("id", PROFILE_ID)),
        name=str(data.get("name", "measured by halo")),
        memory_gib=memory,
        usable_memory_gib=memory,
        memory_bw_gbs=bandwidth,
        decode_efficiency=1.0,
        unified=True,
        source=f"measured by halo lab profile ({origin}, {data.get('created', '?')})",
        shared_cores=cores,
        cpu_only=bool(data.get("cpu_only", True)),
        measured=tuple(sorted(engines.items())),
    )


def link_from_profile(data: dict[str, Any], origin: str) -> Link:
    """The profile's own link: its loopback α and β (the lab fabric without a rate)."""
    link = data.get("link")
    if not isinstance(link, dict):
        raise UsageError(f"{origin}: the profile has no link")
    alpha = _number(link, "alpha_us", f"{origin}: link")
    beta = _number(link, "beta_gbps", f"{origin}: link")
    if beta <= 0:
        raise UsageError(f"{origin}: link.beta_gbps must be > 0")
    return Link("lab", "the lab's fabric as measured (loopback)", alpha, beta, origin)


def _number(obj: dict[str, Any], key: str, origin: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{origin}: {key} must be a finite number, got {value!r}")
    if value < 0 or value > 1e12:
        raise UsageError(f"{origin}: {key} is out of range ({value!r})")
    return float(value)
