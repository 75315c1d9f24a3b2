"""What one ``halo serve`` gave (``ServeResult``, the --json object), for every engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from halo_cluster.checks.engine_limits import LimitReport
from halo_cluster.jsonout import JsonObject


@dataclass
class ServeResult:
    url: str
    log: str
    executor: str
    model: str
    tp: int | None  # vLLM's tensor-parallel size (None for an engine without one)
    expected: str
    verdict: dict[str, Any]  # NCCL/RCCL's log
    engine: dict[str, Any] = field(default_factory=dict)  # the engine's own lines
    traffic: dict[str, Any] = field(default_factory=dict)  # counters per token
    ranks: list[dict[str, Any]] = field(default_factory=list)
    proven: str | None = None
    problems: list[str] = field(default_factory=list)
    ready_s: float | None = None
    warmup_s: float | None = None
    stopped: bool = False
    supervisor: dict[str, Any] | None = None  # the supervisor left on the head, if any
    # each member's available memory and what the model takes there (GiB; the preflight's)
    memory: dict[str, JsonObject] = field(default_factory=dict)
    layout: str | None = None  # what ran where: "vllm tp2 on node1+node2"
    # the token witness: the comparison with the one-node reference (or what was recorded,
    # or why there was none)
    tokens: dict[str, Any] = field(default_factory=dict)
    # each member's engine process as the kernel holds it: its limits, their owner, and
    # what falls short of the plan (checks.engine_limits)
    limits: dict[str, LimitReport] = field(default_factory=dict)

    def to_dict(self) -> JsonObject:
        """The --json object: every field, each node's limits as its report's dict."""
        limits = {node: report.to_dict() for node, report in self.limits.items()}
        return {**self.__dict__, "limits": limits}
