"""``halo demo``: exercises every capability halo has, on bundled example data."""

from __future__ import annotations

import click


@click.command()
@click.option(
    "--json", "as_json", is_flag=True, help="Print what the demo gathered as one JSON object."
)
def demo(as_json: bool) -> int:
    """Run every capability on this machine and on the bundled example nodes."""
    from halo_cluster.cli.inventory import render_inventory
    from halo_cluster.cli.output import console, emit_json
    from halo_cluster.examples import example_root
    from halo_cluster.facts.inventory import collect_inventory

    local = collect_inventory("/")
    example = collect_inventory(str(example_root("strix-e810")))
    if as_json:
        emit_json({"inventory": {"local": local.to_dict(), "strix-e810": example.to_dict()}})
        return 0
    out = console()
    render_inventory(out, local, f"This machine: {local.hostname or '?'}")
    render_inventory(out, example, "Bundled example node: Strix Halo + Intel E810 (RoCE v2)")
    return 0
