"""What one ``halo serve`` gave (``ServeResult``, the --json object), for every engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
    memory: dict[str, dict[str, float | None]] = field(default_factory=dict)
    layout: str | None = None  # what ran where: "vllm tp2 on node1+node2"
    # the token witness: the comparison with the one-node reference (or what was recorded,
    # or why there was none)
    tokens: dict[str, Any] = field(default_factory=dict)
    # each member's engine process as the kernel holds it: its limits, their owner, and
    # what falls short of the plan (checks.engine_limits)
    limits: dict[str, dict[str, Any]] = field(default_factory=dict)
