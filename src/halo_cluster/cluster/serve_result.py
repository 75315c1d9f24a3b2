"""What one ``halo serve`` is (``Launch``) and what it gave (``ServeResult``, the --json
object), and what the state file keeps of it (``state_summary``), for both engines."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from halo_cluster.cluster.serve_plan import Placement
from halo_cluster.config import ServeConfig
from halo_cluster.transport import TransportPlan


@dataclass(frozen=True)
class Launch:
    """One serve: what runs, how wide, on which nodes, with which plans."""

    serve: ServeConfig
    model: str
    tp: int
    places: list[Placement]
    plans: dict[str, TransportPlan]


@dataclass
class ServeResult:
    url: str
    log: str
    executor: str
    model: str
    tp: int
    expected: str
    verdict: dict[str, Any]  # NCCL/RCCL's log
    engine: dict[str, Any] = field(default_factory=dict)  # vLLM's own lines
    traffic: dict[str, Any] = field(default_factory=dict)  # counters per token
    ranks: list[dict[str, Any]] = field(default_factory=list)
    proven: str | None = None
    problems: list[str] = field(default_factory=list)
    ready_s: float | None = None
    warmup_s: float | None = None
    stopped: bool = False


def state_summary(result: ServeResult, serve: ServeConfig, head: str) -> dict[str, Any]:
    """What the state file keeps of a serve (no secrets): where it runs and its proof."""
    return {
        "model": result.model,
        "executor": result.executor,
        "tp": result.tp,
        "host": serve.host,
        "port": serve.port,
        "url": result.url,
        "nodes": sorted({str(r["node"]) for r in result.ranks} | {head}),
        "ranks": result.ranks,
        "proven": result.proven,
        "backend": result.engine.get("backend"),
        "init_method": f"tcp://{result.engine.get('init_address')}:"
        f"{result.engine.get('init_port')}",
        "bytes_per_token": {
            node: {path: v.get("bytes_per_token") for path, v in paths.items()}
            for node, paths in result.traffic.get("nodes", {}).items()
        },
        "problems": result.problems,
        "started_at": time.time(),
    }
