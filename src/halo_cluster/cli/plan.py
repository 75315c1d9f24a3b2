"""``halo plan``: will this model fit on these nodes, and how many tokens/s will the fabric cost?"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from halo_cluster.cli.output import emit_json, table

QUANTS = ["bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "q4"]


@click.command()
@click.argument("model", required=False)
@click.option(
    "--list", "list_models", is_flag=True, help="List the model catalog, hardware and links."
)
@click.option(
    "--hf-config", type=click.Path(dir_okay=False), help="Read the model from a local config.json."
)
@click.option("--nodes", default=2, show_default=True, type=click.IntRange(1, 64))
@click.option("--gpus-per-node", default=1, show_default=True, type=click.IntRange(1, 16))
@click.option("--hardware", default="strix-halo-128", show_default=True)
@click.option("--memory-gib", type=float, help="Override the GPU-usable memory per node.")
@click.option("--memory-bw-gbs", type=float, help="Override the memory bandwidth (GB/s).")
@click.option(
    "--quant",
    type=click.Choice(QUANTS),
    help="Weight format (default: the model's release format).",
)
@click.option("--context", default=8192, show_default=True, type=click.IntRange(1, 10_000_000))
@click.option("--batch", default=1, show_default=True, type=click.IntRange(1, 4096))
@click.option(
    "--link",
    "link_ids",
    multiple=True,
    metavar="LINK",
    help="Link profile (id or alias) or a bench collective result .json; repeatable.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print {model, hardware, rows, recommendation} as JSON."
)
def plan(
    model: str | None,
    list_models: bool,
    hf_config: str | None,
    nodes: int,
    gpus_per_node: int,
    hardware: str,
    memory_gib: float | None,
    memory_bw_gbs: float | None,
    quant: str | None,
    context: int,
    batch: int,
    link_ids: tuple[str, ...],
    as_json: bool,
) -> int:
    """Memory per node for each layout (TP, PP, TP×PP), whether it fits and the longest context,
    decode time per token split into memory-bound compute and network, tokens/s at batch 1 and
    at --batch, and the network's share — per link — with a recommendation."""
    from halo_cluster.errors import UsageError
    from halo_cluster.plan import catalog
    from halo_cluster.plan.model import Request, plan_rows, recommend

    if list_models:
        return _list(as_json)
    if hf_config:
        spec = catalog.model_from_hf_config(Path(hf_config))
    elif model:
        spec = catalog.find_model(model)
    else:
        raise UsageError("name a MODEL (see 'halo plan --list') or pass --hf-config config.json")
    hw = catalog.find_hardware(hardware)
    if memory_gib is not None:
        hw = replace(hw, memory_gib=memory_gib, usable_memory_gib=memory_gib)
    if memory_bw_gbs is not None:
        hw = replace(hw, memory_bw_gbs=memory_bw_gbs)
    links = [catalog.find_link(link) for link in (link_ids or ("roce", "tcp"))]
    quant = quant or (spec.dtype if spec.dtype in QUANTS else "bf16")
    rows = [
        row
        for link in links
        for row in plan_rows(Request(spec, hw, link, nodes, gpus_per_node, quant, context, batch))
    ]
    best, reason = recommend(rows)
    if as_json:
        emit_json(
            {
                "model": {"id": spec.id, "name": spec.name, "quant": quant},
                "hardware": hw.id,
                "nodes": nodes,
                "gpus_per_node": gpus_per_node,
                "context": context,
                "batch": batch,
                "rows": [r.to_dict() for r in rows],
                "recommendation": {"layout": best.layout, "link": best.link, "reason": reason}
                if best
                else {"layout": None, "link": None, "reason": reason},
            }
        )
        return 0
    from halo_cluster.cli.output import console

    grid = table(
        f"{spec.name} ({quant}) on {nodes} × {hw.id}, context {context}, batch {batch}",
        "layout",
        "link",
        "fits",
        "weights/node",
        "KV/node",
        "max ctx",
        "compute ms",
        "network ms",
        "tok/s",
        "tok/s b=1",
        "network",
    )
    for r in rows:
        grid.add_row(
            r.layout,
            r.link,
            "[green]yes[/]" if r.fits else "[red]no[/]",
            f"{r.weights_gib_per_node:.1f} GiB",
            f"{r.kv_gib_per_node:.1f} GiB",
            str(r.max_context),
            f"{r.decode_ms_compute:.2f}",
            f"{r.decode_ms_network:.2f}",
            f"{r.tokens_per_s:.1f}",
            f"{r.tokens_per_s_batch1:.2f}",
            f"{r.network_share:.1%}",
        )
    out = console()
    out.print(grid)
    out.print(f"recommendation: {reason}")
    return 0


def _list(as_json: bool) -> int:
    from halo_cluster.plan import catalog
    from halo_cluster.plan.model import active_params, total_params

    models = catalog.models()
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
                "links": list(catalog.links()),
            }
        )
        return 0
    from halo_cluster.cli.output import console

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
    out.print("hardware: " + ", ".join(catalog.hardware_profiles()))
    out.print(
        "links: "
        + ", ".join(
            f"{k} ({v.alpha_us:g} µs, {v.beta_gbps:g} Gb/s)" for k, v in catalog.links().items()
        )
    )
    return 0
