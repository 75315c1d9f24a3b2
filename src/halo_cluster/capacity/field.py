"""The field table (capacity/data/field.json): published decode measurements on Strix Halo, the
capacity planner's prediction for each, and the engine efficiencies the calibration rows imply."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

from halo_cluster.capacity import catalog
from halo_cluster.capacity.engines import Efficiency, Engine, find_engine
from halo_cluster.capacity.estimate import (
    Request,
    engine_layouts,
    evaluate,
    fixed_seconds,
    step_seconds,
)
from halo_cluster.capacity.quants import find_quant
from halo_cluster.capacity.spec import Link, ModelSpec
from halo_cluster.capacity.weights import GIB, from_quant, scaled_to_file
from halo_cluster.jsonout import JsonObject

HARDWARE = "strix-halo-128"
TG_CONTEXT = 128  # llama-bench tg128: 128 tokens decoded from an empty context


@dataclass(frozen=True)
class FieldRow:
    id: str
    model: str
    quant: str
    engine: str
    nodes: int
    published: float
    role: str
    source: str
    weights_gib: float | None = None
    link: str | None = None
    layout: str | None = None


def rows() -> list[FieldRow]:
    return [FieldRow(**row) for row in catalog.capacity_data("field.json")["rows"]]


def _model(name: str) -> ModelSpec:
    configs = catalog.capacity_data("field.json")["configs"]
    if name in configs:
        return ModelSpec(id=name, **configs[name])
    return catalog.find_model(name)


def _link(name: str | None) -> Link:
    if name is None:
        return catalog.find_link("roce")  # a one-node row crosses no link
    links: dict[str, Any] = catalog.capacity_data("field.json")["links"]
    if name in links:
        return Link(id=name, **links[name])
    return catalog.find_link(name)


def request(row: FieldRow, engine: Engine | None = None) -> Request:
    """The capacity planner's request for a field row (``engine``: an engine with other figures)."""
    model = _model(row.model)
    weights = from_quant(model, find_quant(row.quant))
    if row.weights_gib is not None:
        weights = scaled_to_file(weights, row.weights_gib * GIB)
    return Request(
        model,
        catalog.find_hardware(HARDWARE),
        _link(row.link),
        nodes=row.nodes,
        quant=row.quant,
        context=TG_CONTEXT,
        batch=1,
        engine=engine or find_engine(row.engine),
        weights=weights,
    )


def _layout(req: Request, row: FieldRow) -> tuple[str, int, int]:
    layouts = engine_layouts(req)
    for name, tp, pp in layouts:
        if row.layout is None or name == row.layout:
            return name, tp, pp
    raise ValueError(f"{row.id}: the engine has no layout {row.layout}")


def predict(row: FieldRow, engine: Engine | None = None) -> JsonObject:
    """The capacity planner's tokens/s (and range) for the row next to the published figure."""
    req = request(row, engine)
    name, tp, pp = _layout(req, row)
    result = evaluate(req, tp, pp, name)
    error = (result.tokens_per_s - row.published) / row.published
    return {
        "id": row.id,
        "model": row.model,
        "quant": row.quant if row.weights_gib is None else f"{row.quant} @ {row.weights_gib} GiB",
        "engine": row.engine,
        "nodes": row.nodes,
        "layout": name,
        "link": req.link.id if row.nodes > 1 else None,
        "role": row.role,
        "published": row.published,
        "predicted": round(result.tokens_per_s, 2),
        "low": round(result.tokens_per_s_low, 2),
        "high": round(result.tokens_per_s_high, 2),
        "error": round(error, 4),
        "source": row.source,
    }


def with_fixed(engine: Engine, per_layer_us: float, per_linear_layer_us: float) -> Engine:
    """``engine`` with these fixed costs on the field table's hardware."""
    tuning = engine.tuning(catalog.find_hardware(HARDWARE))
    fixed = replace(tuning, per_layer_us=per_layer_us, per_linear_layer_us=per_linear_layer_us)
    return replace(engine, tunings={**engine.tunings, HARDWARE: fixed})


def implied_share(row: FieldRow, per_layer_us: float, per_linear_layer_us: float) -> float:
    """The bandwidth share that makes the capacity planner reproduce the row exactly."""
    req = request(row, with_fixed(find_engine(row.engine), per_layer_us, per_linear_layer_us))
    _, tp, pp = _layout(req, row)
    compute, network = step_seconds(req, tp, pp, 1, 1.0)  # at the full bandwidth
    fixed = fixed_seconds(req)
    return (compute - fixed) / (1 / row.published - network - fixed)


def derive(
    engine_id: str, per_layer_us: float, per_linear_layer_us: float, exclude: str = ""
) -> dict[str, Efficiency]:
    """Dense and MoE efficiencies from the engine's calibration rows (all but ``exclude``):
    the median share they imply, their minimum and maximum as the range. An engine with
    pooled kinds gets one efficiency from all its rows."""
    pooled = find_engine(engine_id).pool_kinds
    result: dict[str, Efficiency] = {}
    for kind in ("dense", "moe"):
        chosen = [
            r
            for r in rows()
            if r.engine == engine_id
            and r.role == "calibration"
            and r.id != exclude
            and (pooled or _model(r.model).is_moe == (kind == "moe"))
        ]
        shares = [implied_share(r, per_layer_us, per_linear_layer_us) for r in chosen]
        ids = ", ".join(r.id for r in chosen)
        result[kind] = Efficiency(
            round(statistics.median(shares), 3),
            round(min(shares), 3),
            round(max(shares), 3),
            f"median of {len(shares)} published measurements ({ids}; capacity/data/field.json)",
        )
    return result
