"""The layouts 'halo tune' runs and 'halo run' chooses from: every engine's own layouts
(``Engine.layouts``) on the first 1 … N nodes of the cluster, the fewest nodes first, and a
layout's name (``vllm TP2``, ``llama.cpp RPC3``, the planner's names after the engine's)
read back by its engine. No engine is named here: a new engine's layouts appear when it is
registered (``engine_registry``)."""

from __future__ import annotations

from halo_cluster import engine_registry
from halo_cluster.engines.layout import Layout
from halo_cluster.engines.protocol import every_engine, find_engine
from halo_cluster.errors import UsageError


def parse_layout(text: str, nodes: int, gpus_per_node: int = 1) -> Layout:
    """A layout by name ("vllm TP2", "llama.cpp RPC3", case aside); one that does not fit
    the cluster is a UsageError naming its size."""
    word, _, shape = text.strip().partition(" ")
    known = {name.lower(): name for name in engine_registry.names()}
    engine = known.get(word.lower())
    if engine is None or not shape.strip():
        examples = [f"'{e.name} {x}'" for e in every_engine() for x in e.layout_examples]
        raise UsageError(f"layout {text.strip()!r}: give one like {', '.join(examples)}")
    layout = find_engine(engine).layout(shape, gpus_per_node)
    if not 1 <= layout.nodes <= nodes or min(layout.tp, layout.pp) < 1:
        raise UsageError(
            f"layout {layout.name} needs {layout.nodes} node(s); the cluster has {nodes}"
        )
    return layout


def candidates(
    nodes: int, engines: tuple[str, ...] | None = None, heads: int | None = None, gpus: int = 1
) -> list[Layout]:
    """Every layout the cluster can run (of ``engines``; None: every engine), the fewest
    nodes first, the engines in the registry's order."""
    chosen = [e for e in every_engine() if engines is None or e.name in engines]
    return [
        x for count in range(1, nodes + 1) for e in chosen for x in e.layouts(count, gpus, heads)
    ]


def one_node(engine: str) -> Layout | None:
    """The engine's layout on the head alone, the one that records the token reference
    (None for an engine that needs more nodes)."""
    return next(iter(find_engine(engine).layouts(1, 1, None)), None)
