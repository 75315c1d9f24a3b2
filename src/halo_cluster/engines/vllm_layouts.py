"""vLLM's layouts (pure): every TP×PP that fills the ranks of N nodes (one rank per node on
CPU-only nodes, ``gpus`` per node elsewhere; TP dividing the attention heads, when known),
named ``TP2``, ``PP2``, ``TP2xPP2``, and served on vLLM's own executor (``mp``: no Ray)."""

from __future__ import annotations

import re

from halo_cluster.engines.layout import Layout
from halo_cluster.errors import UsageError

NAME = "vllm"
EXAMPLES = ("TP2", "PP2", "TP2xPP2")
_SHAPE = re.compile(r"^(?:TP(?P<tp>\d+)(?:xPP(?P<tpp>\d+))?|PP(?P<pp>\d+))$", re.IGNORECASE)


def layout(nodes: int, tp: int, pp: int) -> Layout:
    shape = f"TP{tp}" if pp == 1 else (f"PP{pp}" if tp == 1 else f"TP{tp}xPP{pp}")
    serve = (("executor", "mp"), ("nodes", nodes), ("tp", tp), ("pp", pp))
    return Layout(NAME, nodes, shape, tp, pp, serve)


def layouts(nodes: int, gpus: int, heads: int | None) -> list[Layout]:
    """The layouts on exactly ``nodes`` nodes, the widest tensor-parallel first."""
    ranks = nodes * gpus
    return [
        layout(nodes, tp, ranks // tp)
        for tp in range(ranks, 0, -1)
        if not ranks % tp and (heads is None or not heads % tp)
    ]


def parse(shape: str, gpus: int) -> Layout:
    """``TP2`` and the like -> the layout (its nodes: the ranks over ``gpus`` per node)."""
    found = _SHAPE.match(shape.strip())
    if found is None:
        raise UsageError(f"layout '{NAME} {shape.strip()}': vLLM runs TPn, PPn or TPnxPPm")
    tp = int(found["tp"] or 1)
    pp = int(found["tpp"] or found["pp"] or 1)
    return layout(-(-tp * pp // gpus), tp, pp)
