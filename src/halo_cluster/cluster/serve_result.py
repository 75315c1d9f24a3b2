"""What one ``halo serve`` is (``Launch``) and what it gave (``ServeResult``, the --json
object), for both engines."""

from __future__ import annotations

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
