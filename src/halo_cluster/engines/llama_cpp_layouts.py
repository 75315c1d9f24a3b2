"""llama.cpp's layouts (pure): ``single`` (llama-server alone on the head) and ``RPCn`` (the
model's layers spread over n nodes, the head's llama-server and an RPC server on each other
node). For the planner the layers over n nodes are n pipeline stages."""

from __future__ import annotations

import re

from halo_cluster.engines.layout import Layout
from halo_cluster.errors import UsageError

NAME = "llama.cpp"
EXAMPLES = ("single", "RPC2")
_SHAPE = re.compile(r"^(?:(?P<single>single)|RPC(?P<rpc>\d+))$", re.IGNORECASE)


def layout(nodes: int) -> Layout:
    shape = "single" if nodes == 1 else f"RPC{nodes}"
    return Layout(NAME, nodes, shape, tp=1, pp=nodes, serve=(("nodes", nodes),))


def layouts(nodes: int, gpus: int, heads: int | None) -> list[Layout]:
    """The one layout on exactly ``nodes`` nodes (GPUs per node and heads do not change it)."""
    return [layout(nodes)]


def parse(shape: str, gpus: int) -> Layout:
    found = _SHAPE.match(shape.strip())
    if found is None:
        raise UsageError(f"layout '{NAME} {shape.strip()}': llama.cpp runs single or RPCn")
    return layout(1 if found["single"] else int(found["rpc"]))
