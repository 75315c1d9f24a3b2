"""The cluster's state file (``<config dir>/.halo/<cluster>.state.json``): every node's
transport plan and engine ranks from ``halo up``, and what ``halo serve`` started and
proved. Written atomically; no secrets (plans and proofs hold none)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halo_cluster.atomic import atomic_write
from halo_cluster.config import Config
from halo_cluster.transport import TransportPlan


@dataclass
class UpResult:
    started: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    plans: dict[str, TransportPlan] = field(default_factory=dict)
    nodes_alive: list[str] = field(default_factory=list)
    ranks: dict[str, int] = field(default_factory=dict)  # engine ranks each node offers


def state_path(config: Config) -> Path:
    return config.path.parent / ".halo" / f"{config.name}.state.json"


def write_state(config: Config, result: UpResult) -> None:
    """Atomically: plans per node, head address, start time (no secrets: plans hold none)."""
    path = state_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    previous = read_state(config) or {}
    data = {
        "schema": "halo.state/1",
        "cluster": config.name,
        "head": config.head.name,
        "head_address": config.head.address,
        "started_at": previous.get("started_at") if not result.started else time.time(),
        "nodes": {
            name: {"plan": plan.to_dict(), "ranks": result.ranks.get(name, 1)}
            for name, plan in result.plans.items()
        },
    }
    if data["started_at"] is None:
        data["started_at"] = time.time()
    _write_json(path, data)


def update_state(config: Config, key: str, value: Any) -> None:
    """Set one top-level entry of the state file (atomically); no state: nothing to do."""
    data = read_state(config)
    if data is None:
        return
    if value is None:
        data.pop(key, None)
    else:
        data[key] = value
    _write_json(state_path(config), data)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2), prefix=".state.")


def read_state(config: Config) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(state_path(config).read_text(encoding="utf-8"))
        return data
    except (OSError, ValueError):
        return None
