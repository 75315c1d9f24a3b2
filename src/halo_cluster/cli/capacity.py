"""``halo plan``: will this model fit on these nodes, and how many tokens/s will the fabric cost?"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from halo_cluster import engine_registry
from halo_cluster.cli.output import table
from halo_cluster.jsonout import emit_json

if TYPE_CHECKING:
    from halo_cluster.capacity.engines import Engine
    from halo_cluster.capacity.estimate import Request, Row
    from halo_cluster.capacity.power import Draw
    from halo_cluster.capacity.spec import Hardware, ModelSpec
    from halo_cluster.capacity.weights import WeightBytes


@click.command()
@click.argument("model", required=False)
@click.option(
    "--list", "list_models", is_flag=True, help="List the model catalog, hardware and links."
)
@click.option(
    "--hf-config", type=click.Path(dir_okay=False), help="Read the model from a local config.json."
)
@click.option(
    "--gguf",
    "gguf_path",
    type=click.Path(dir_okay=False),
    help="Read the model and its exact tensor sizes from a GGUF file (first shard is enough).",
)
@click.option(
    "--engine",
    type=click.Choice(engine_registry.names()),
    default=engine_registry.DEFAULT,
    show_default=True,
)
@click.option("--nodes", default=2, show_default=True, type=click.IntRange(1, 64))
@click.option("--gpus-per-node", default=1, show_default=True, type=click.IntRange(1, 16))
@click.option(
    "--hardware",
    default="strix-halo-128",
    show_default=True,
    help="A hardware profile (see --list), 'lab' (this machine, measured by 'halo lab profile') "
    "or a profile .json.",
)
@click.option("--memory-gib", type=float, help="Override the GPU-usable memory per node.")
@click.option("--memory-bw-gbs", type=float, help="Override the memory bandwidth (GB/s).")
@click.option(
    "--quant",
    metavar="FORMAT",
    help="Weight format: bf16, fp16, fp8, int8, int4, awq, gptq, gptq-int8, mxfp4, q4, or a "
    "GGUF type (Q8_0, Q6_K, Q5_K_M, Q5_K_S, Q4_K_M, Q4_K_S, Q4_0, Q3_K_M, Q3_K_S, Q2_K, "
    "IQ4_XS, IQ3_XXS, IQ2_XXS, MXFP4). Default: the model's release format.",
)
@click.option(
    "--weights-gib",
    type=float,
    help="The model file's size in GiB (dynamic quants such as UD-Q3_K_XL).",
)
@click.option(
    "--calibrate",
    type=click.Path(dir_okay=False),
    metavar="RESULT.json",
    help="A one-node halo bench serve result of this model (concurrency 1).",
)
@click.option("--context", default=8192, show_default=True, type=click.IntRange(1, 10_000_000))
@click.option(
    "--batch",
    default=1,
    show_default=True,
    type=click.IntRange(1, 4096),
    help="Concurrent requests for the tokens/s column (replicas share them evenly).",
)
@click.option(
    "--link",
    "link_ids",
    multiple=True,
    metavar="LINK",
    help="A link preset (id or alias, see --list), your own as alpha=70us,bw=5gbit[,stack=rdma], "
    "'lab' (measured by 'halo lab profile') or a bench collective result .json; repeatable.",
)
@click.option(
    "--watts",
    is_flag=False,
    flag_value="hardware",
    default=None,
    metavar="[W|RESULT.json]",
    help="Tokens per joule for each layout: alone, the hardware profile's typical draw per "
    "node; or watts per node; or a halo bench serve result that measured the nodes' power.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print {model, hardware, rows, recommendation} as JSON."
)
def plan(**options: Any) -> int:
    """Memory per node for each layout (vLLM: TP, PP, TP×PP; llama.cpp: one node or an RPC
    layer split), whether it fits and the longest context, decode time per token split into
    memory-bound compute and network, tokens/s (with the range of the measurements behind
    it) at batch 1 and at --batch, and the network's share — per link — with a
    recommendation. With --nodes N, also 'R x LAYOUT': R = N/k replicas of each k-node
    layout, each on its own nodes (the recommendation stays among the N-node layouts)."""
    given = PlanOptions(**options)
    if given.list_models:
        return _list(given.as_json)
    return _estimate(given)


@dataclass(frozen=True)
class PlanOptions:
    """What ``halo plan`` was given, once, as its options name it."""

    model: str | None
    list_models: bool
    hf_config: str | None
    gguf_path: str | None
    engine: str
    nodes: int
    gpus_per_node: int
    hardware: str
    memory_gib: float | None
    memory_bw_gbs: float | None
    quant: str | None
    weights_gib: float | None
    calibrate: str | None
    context: int
    batch: int
    link_ids: tuple[str, ...]
    watts: str | None
    as_json: bool


# what a node and a model can be, far on both sides: below, the planner divides by almost
# nothing (--memory-bw-gbs 1e-310); above, a size in bytes overflows (--memory-gib 1e308)
BOUNDS = {
    "memory-gib": (1e-3, 1e6, "memory size"),
    "memory-bw-gbs": (1e-3, 1e6, "memory bandwidth"),
    "weights-gib": (1e-6, 1e5, "model size"),
}


def _positive(name: str, value: float | None) -> float | None:
    from halo_cluster.errors import UsageError

    if value is None:
        return None
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"--{name} must be a finite number > 0, got {value!r}")
    low, high, what = BOUNDS[name]
    if not low <= value <= high:
        raise UsageError(
            f"--{name} {value:g} is not a plausible {what}: give one from {low:g} to {high:g}"
        )
    return value


def _model(options: PlanOptions) -> tuple[ModelSpec, WeightBytes | None, str]:
    """The model spec, its GGUF weights if read from a file, and a note on the bytes."""
    from halo_cluster.capacity import catalog
    from halo_cluster.capacity.hf_config import model_from_hf_config
    from halo_cluster.errors import UsageError

    if options.gguf_path:
        from halo_cluster.capacity.gguf_file import read_gguf

        found = read_gguf(Path(options.gguf_path))
        return found.spec, found.weights, found.note
    if options.hf_config:
        return model_from_hf_config(Path(options.hf_config)), None, ""
    if options.model:
        return catalog.find_model(options.model), None, ""
    raise UsageError("name a MODEL (see 'halo plan --list'), or pass --hf-config or --gguf")


def _hardware(options: PlanOptions) -> Hardware:
    from halo_cluster.capacity import catalog
    from halo_cluster.config import profiles_dir

    hw = catalog.find_hardware(options.hardware, profiles_dir())
    memory = _positive("memory-gib", options.memory_gib)
    bandwidth = _positive("memory-bw-gbs", options.memory_bw_gbs)
    if memory is not None:
        hw = replace(hw, memory_gib=memory, usable_memory_gib=memory)
    if bandwidth is not None:
        hw = replace(hw, memory_bw_gbs=bandwidth)
    return hw


def _weights(
    options: PlanOptions, spec: ModelSpec, gguf: WeightBytes | None, engine: Engine
) -> tuple[str, WeightBytes]:
    """(the format name, the weight bytes) from --quant, --weights-gib, --gguf or the catalog."""
    from halo_cluster.capacity.quants import find_quant
    from halo_cluster.capacity.weights import GIB, from_quant, scaled_to_file

    file_gib = _positive("weights-gib", options.weights_gib)
    given = options.quant
    release = engine.release_formats.get(spec.dtype, spec.dtype)
    fallback = engine.default_quant if file_gib is not None and gguf is None else release
    quant = find_quant(given or fallback)
    if gguf is not None and given is None:
        weights = gguf
    else:
        weights = from_quant(spec, quant, "quant" if given else "catalog")
    if file_gib is not None:
        weights = scaled_to_file(weights, file_gib * GIB)
    return quant.name, weights


def _requests(options: PlanOptions) -> tuple[list[Request], str, str]:
    from halo_cluster.capacity import catalog
    from halo_cluster.capacity.calibration import read_serve_result
    from halo_cluster.capacity.engines import find_engine
    from halo_cluster.capacity.estimate import Request

    spec, gguf, note = _model(options)
    hw = _hardware(options)
    engine = find_engine(options.engine)
    quant, weights = _weights(options, spec, gguf, engine)
    calibration = read_serve_result(Path(options.calibrate)) if options.calibrate else None
    from halo_cluster.config import profiles_dir

    links = [
        catalog.find_link(link, profiles_dir()) for link in (options.link_ids or ("roce", "tcp"))
    ]
    if options.nodes == 1:  # one node crosses no link: one row per layout is enough
        links = links[:1]
    requests = [
        Request(
            spec,
            hw,
            link,
            nodes=options.nodes,
            gpus_per_node=options.gpus_per_node,
            quant=quant,
            context=options.context,
            batch=options.batch,
            engine=engine,
            weights=weights,
            calibration=calibration,
        )
        for link in links
    ]
    return requests, quant, note


def _estimate(options: PlanOptions) -> int:
    from halo_cluster.capacity.estimate import node_steps, recommend

    requests, quant, note = _requests(options)
    rows = _rows(requests)
    best, reason = recommend([row for row in rows if row.replicas == 1])
    req = requests[0]
    steps = {r.link.id: node_steps(r) for r in requests} if req.nodes > 1 else {}
    chosen = best.link if best is not None and best.link in steps else next(iter(steps), "")
    lines = _step_lines(steps.get(chosen, []), req.batch, chosen)
    draw = _draw(options.watts, req.hardware) if options.watts else None
    if options.as_json:
        document = _document(req, rows, best, reason, quant, note)
        if draw is not None:
            document["power"] = draw.to_dict()
            for row, shown in zip(rows, document["rows"], strict=True):
                shown.update(_per_joule(req, row, draw))
        document["nodes_added"] = {
            "link": chosen or None,
            "lines": lines,
            "steps": {link: [s.to_dict() for s in found] for link, found in steps.items()},
        }
        emit_json(document)
        return 0
    _render(req, rows, reason, quant, note, draw)
    if lines:
        from halo_cluster.cli.output import console, safe

        out = console()
        out.print(safe(f"adding nodes over {chosen}:"))
        for line in lines:
            out.print(safe(f"  {line}"))
    return 0


def _rows(requests: list[Request]) -> list[Row]:
    """Per link, its layouts on every node and then its replica rows; the one-node replicas
    cross no link, so only the first link has them (as --nodes 1 has one row per layout)."""
    from halo_cluster.capacity.estimate import layout_rows
    from halo_cluster.capacity.replicas import replica_rows

    rows: list[Row] = []
    for index, req in enumerate(requests):
        rows += layout_rows(req) + replica_rows(req, one_node=index == 0)
    return rows


def _draw(watts: str, hardware: Hardware) -> Draw:
    from halo_cluster.capacity.hf_config import read_json_object
    from halo_cluster.capacity.power import given_draw, measured_draw

    draw = given_draw(watts, hardware)
    if draw is not None:
        return draw
    from halo_cluster.schema import require_kind

    data = read_json_object(Path(watts), "a bench serve result")
    require_kind(data, "serve", watts)
    return measured_draw(data, watts)


def _per_joule(req: Request, row: Row, draw: Draw) -> dict[str, float | int]:
    """Tokens per joule at --batch and at batch 1, over the nodes the layout runs on (every
    replica's: an idle replica is up all the same)."""
    from halo_cluster.capacity.estimate import ranks_per_node
    from halo_cluster.capacity.power import nodes_used, tokens_per_joule

    nodes = row.replicas * nodes_used(row.tp, row.pp, ranks_per_node(req))
    return {
        "nodes_used": nodes,
        "tokens_per_joule": round(tokens_per_joule(row.tokens_per_s, nodes, draw), 4),
        "tokens_per_joule_batch1": round(tokens_per_joule(row.tokens_per_s_batch1, nodes, draw), 4),
    }


def _step_lines(steps: list[Any], batch: int, link: str) -> list[str]:
    """One line per added node: faster or slower, by how much and why."""
    from halo_cluster.capacity.estimate import step_sentence

    return [step_sentence(step, prev, batch, link) for prev, step in pairwise(steps)]


def _document(
    req: Request, rows: list[Row], best: Row | None, reason: str, quant: str, note: str
) -> dict[str, Any]:
    from halo_cluster.capacity.weights import GIB

    weights = req.resolved_weights()
    return {
        "model": {"id": req.model.id, "name": req.model.name, "quant": quant},
        "hardware": req.hardware.id,
        "engine": req.engine.id,
        "nodes": req.nodes,
        "gpus_per_node": req.gpus_per_node,
        "context": req.context,
        "batch": req.batch,
        "weights": {
            "source": weights.source,
            "gib": round(weights.total / GIB, 3),
            "note": note or None,
        },
        "calibration": req.calibration.label if req.calibration else None,
        "rows": [r.to_dict() for r in rows],
        "recommendation": {"layout": best.layout, "link": best.link, "reason": reason}
        if best
        else {"layout": None, "link": None, "reason": reason},
    }


def _render(
    req: Request, rows: list[Row], reason: str, quant: str, note: str, draw: Draw | None
) -> None:
    from rich.text import Text

    from halo_cluster.cli.output import console, safe

    grid = table(
        f"{req.model.name} ({quant}) with {req.engine.id} on {req.nodes} × {req.hardware.id}, "
        f"context {req.context}, batch {req.batch}",
        *("layout", "link", "fits", "weights/node", "KV/node", "max ctx", "compute ms"),
        *("network ms", "tok/s (range)", "tok/s b=1", "network"),
        *(("tok/J", "tok/J b=1") if draw else ()),
    )
    for r in rows:
        joule = _per_joule(req, r, draw) if draw else {}
        grid.add_row(
            Text(r.layout, style="cyan") if r.replicas > 1 else r.layout,
            r.link,
            Text("yes", style="green") if r.fits else Text("no", style="red"),
            f"{r.weights_gib_per_node:.1f} GiB",
            f"{r.kv_gib_per_node:.1f} GiB",
            str(r.max_context),
            f"{r.decode_ms_compute:.2f}",
            f"{r.decode_ms_network:.2f}",
            f"{r.tokens_per_s:.1f} ({r.tokens_per_s_low:.1f}–{r.tokens_per_s_high:.1f})",
            f"{r.tokens_per_s_batch1:.2f}",
            f"{r.network_share:.1%}",
            *((f"{joule['tokens_per_joule']:.3f}", f"{joule['tokens_per_joule_batch1']:.3f}")
              if draw else ()),
        )  # fmt: skip
    out = console()
    out.print(grid)
    source = rows[0].efficiency_source if rows else ""
    # a GGUF file's names and notes are data: shown as they are, never as markup
    weights = rows[0].weights_source if rows else "-"
    out.print(safe(f"weights: {weights}" + (f" ({note})" if note else "")))
    out.print(safe(f"efficiency: {source}"))
    out.print(safe(f"recommendation: {reason}"))
    if any(r.replicas > 1 for r in rows):
        out.print(safe(REPLICAS_LEGEND.format(batch=req.batch)))
    if draw is not None:
        out.print(safe(f"power: {draw.watts_per_node:g} W per node while decoding, {draw.source}; "
                       "tokens per joule over the nodes each layout runs on"))  # fmt: skip


REPLICAS_LEGEND = (
    "R x LAYOUT: R replicas of a layout, each on its own nodes behind the gateway; tok/s b=1 "
    "is one replica's (one request sees one), tok/s the {batch} requests spread evenly, each "
    "replica at its own concurrency, summed; memory and ms per replica (--json: rows[].note)"
)


def _list(as_json: bool) -> int:
    from halo_cluster.capacity import catalog
    from halo_cluster.capacity.engines import engines
    from halo_cluster.capacity.params import active_params, total_params
    from halo_cluster.capacity.quants import quant_names

    models = catalog.models()
    links = catalog.links()
    if as_json:
        emit_json(
            {
                "models": {
                    k: {
                        "name": m.name,
                        "params_b": round(total_params(m) / 1e9, 2),
                        "active_params_b": round(active_params(m) / 1e9, 2),
                        "layers": m.layers,
                        "hidden": m.hidden,
                        "dtype": m.dtype,
                    }
                    for k, m in models.items()
                },
                "hardware": list(catalog.hardware_profiles()),
                "links": {
                    k: {
                        "name": v.name,
                        "alpha_us": v.alpha_us,
                        "beta_gbps": v.beta_gbps,
                        "stack": v.stack,
                        "source": v.source,
                    }
                    for k, v in links.items()
                },
                "link_aliases": catalog.link_aliases(),
                "engines": list(engines()),
                "quants": quant_names(),
            }
        )
        return 0
    from halo_cluster.cli.output import console, safe

    grid = table("Models", "id", "name", "params", "active", "layers", "hidden", "format")
    for key, m in models.items():
        grid.add_row(
            key,
            m.name,
            f"{total_params(m) / 1e9:.1f} B",
            f"{active_params(m) / 1e9:.1f} B",
            str(m.layers),
            str(m.hidden),
            m.dtype,
        )
    out = console()
    out.print(grid)
    aliases: dict[str, list[str]] = {}
    for alias, target in catalog.link_aliases().items():
        aliases.setdefault(target, []).append(alias)
    grid = table("Links (--link ID, or your own: alpha=70us,bw=5gbit[,stack=rdma])",
                 "id", "link", "α µs", "β Gb/s", "stack", "aliases")  # fmt: skip
    for key, v in links.items():
        grid.add_row(
            key,
            v.name,
            f"{v.alpha_us:g}",
            f"{v.beta_gbps:g}",
            v.stack,
            ", ".join(aliases.get(key, [])),
        )
    out.print(grid)
    out.print("link sources: halo plan --list --json (links.*.source)")
    out.print(
        safe(
            "hardware: "
            + ", ".join(catalog.hardware_profiles())
            + ", lab (this machine, measured by 'halo lab profile')"
        )
    )
    out.print("engines: " + ", ".join(engines()))
    out.print("quants: " + ", ".join(quant_names()))
    return 0
