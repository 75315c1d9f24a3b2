"""A layout: one engine on the first N nodes of the cluster (the head first), in the shape
that engine names it (pure). Each engine makes its own layouts and reads their names back
(``Engine.layouts``, ``Engine.layout``); ``halo tune`` orders and measures them, ``halo run``
chooses one, the planner predicts each.

``tp`` and ``pp`` are the planner's split of the model over the ranks (tensor- and
pipeline-parallel); ``serve`` is what ``halo serve`` is given for the layout besides the
engine's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from halo_cluster.jsonout import JsonObject


@dataclass(frozen=True)
class Layout:
    engine: str
    nodes: int
    shape: str  # the engine's name for it: "TP2xPP2", "RPC3", "single"
    tp: int = 1
    pp: int = 1
    serve: tuple[tuple[str, Any], ...] = ()  # serve_request's keywords (nodes among them)

    @property
    def name(self) -> str:
        return f"{self.engine} {self.shape}"

    @property
    def planner(self) -> str:
        """The planner's name of the same layout (its rows' ``layout``)."""
        return self.shape

    def serve_args(self) -> dict[str, Any]:
        """What 'halo serve' is given for it (serve_request's keywords)."""
        return {"engine": self.engine, **dict(self.serve)}

    def to_dict(self) -> JsonObject:
        return {
            "name": self.name,
            "engine": self.engine,
            "nodes": self.nodes,
            "tp": self.tp,
            "pp": self.pp,
        }
