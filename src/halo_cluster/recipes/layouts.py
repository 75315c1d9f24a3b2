"""The layouts 'halo tune' runs and 'halo run' chooses from (pure): an engine, how many of
the cluster's nodes (the first N, the head first) and, for vLLM, its tensor- and
pipeline-parallel sizes (one rank per node on CPU-only nodes, ``gpus`` per node
elsewhere).

Names follow the planner's: ``llama.cpp single`` (llama-server alone on the head),
``llama.cpp RPC3`` (the layers over three nodes), ``vllm TP2``, ``vllm PP2``,
``vllm TP2xPP2``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from halo_cluster.errors import UsageError

ENGINES = ("vllm", "llama.cpp")
_NAME = re.compile(
    r"^(?P<engine>vllm|llama\.cpp)\s+(?:(?P<single>single)|RPC(?P<rpc>\d+)|"
    r"TP(?P<tp>\d+)(?:xPP(?P<tpp>\d+))?|PP(?P<pp>\d+))$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Layout:
    engine: str
    nodes: int
    tp: int = 1
    pp: int = 1

    @property
    def name(self) -> str:
        if self.engine == "llama.cpp":
            return "llama.cpp single" if self.nodes == 1 else f"llama.cpp RPC{self.nodes}"
        if self.pp == 1:
            return f"vllm TP{self.tp}"
        return f"vllm PP{self.pp}" if self.tp == 1 else f"vllm TP{self.tp}xPP{self.pp}"

    @property
    def planner(self) -> str:
        """The planner's name of the same layout (its rows' ``layout``)."""
        return self.name.split(" ", 1)[1]

    def serve_args(self) -> dict[str, Any]:
        """What 'halo serve' is given for it (serve_request's keywords): vLLM on its own
        executor, which needs no Ray."""
        if self.engine == "llama.cpp":
            return {"engine": "llama.cpp", "nodes": self.nodes}
        return {
            "engine": "vllm",
            "executor": "mp",
            "nodes": self.nodes,
            "tp": self.tp,
            "pp": self.pp,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "engine": self.engine,
            "nodes": self.nodes,
            "tp": self.tp,
            "pp": self.pp,
        }


def parse_layout(text: str, nodes: int, gpus_per_node: int = 1) -> Layout:
    """A layout by name ("vllm TP2", "llama.cpp RPC3", case aside); one that does not fit
    the cluster is a UsageError naming its size."""
    found = _NAME.match(text.strip())
    if found is None:
        raise UsageError(
            f"layout {text.strip()!r}: give one like 'vllm TP2', 'vllm PP2', 'vllm TP2xPP2', "
            "'llama.cpp single' or 'llama.cpp RPC2'"
        )
    engine = found["engine"].lower()
    if engine == "llama.cpp":
        if found["tp"] or found["pp"]:
            raise UsageError(f"layout {text.strip()!r}: llama.cpp runs single or RPCn")
        count = 1 if found["single"] else int(found["rpc"])
        layout = Layout("llama.cpp", count)
    else:
        if found["single"] or found["rpc"]:
            raise UsageError(f"layout {text.strip()!r}: vLLM runs TPn, PPn or TPnxPPm")
        tp = int(found["tp"] or 1)
        pp = int(found["tpp"] or found["pp"] or 1)
        layout = Layout("vllm", -(-tp * pp // gpus_per_node), tp, pp)
    if not 1 <= layout.nodes <= nodes or min(layout.tp, layout.pp) < 1:
        raise UsageError(
            f"layout {layout.name} needs {layout.nodes} node(s); the cluster has {nodes}"
        )
    return layout


def candidates(
    nodes: int, engines: tuple[str, ...] = ENGINES, heads: int | None = None, gpus: int = 1
) -> list[Layout]:
    """Every layout the cluster can run, the fewest nodes first: llama.cpp on one node and
    over RPC on 2 … N; vLLM with every TP×PP that fills 1 … N nodes (TP dividing the
    attention heads, when known)."""
    out = []
    for count in range(1, nodes + 1):
        if "llama.cpp" in engines:
            out.append(Layout("llama.cpp", count))
        if "vllm" not in engines:
            continue
        ranks = count * gpus
        for tp in range(ranks, 0, -1):
            if ranks % tp or (heads is not None and heads % tp):
                continue
            pp = ranks // tp
            out.append(Layout("vllm", count, tp, pp))
    return out
