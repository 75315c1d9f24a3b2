"""The cluster's state file (``<config dir>/.halo/<cluster>.state.json``, schema
``halo.state/2``): every node's transport plan and engine ranks (from ``halo up``, or from
the last ``halo serve`` where Ray plays no part), when Ray was started, what the last
``halo serve`` started and proved, and the named deployments (``cluster.deployments``; each
replica's own proof is in its unit's state file). Read once per command, written
atomically; no secrets (plans and proofs hold none). A ``halo.state/1`` file is read and
carried over (it had no deployments); another schema, or garbage, is one line."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from halo_cluster import engine_registry
from halo_cluster.atomic import atomic_write
from halo_cluster.bounded.infile import read_text
from halo_cluster.bounded.jsonin import loads
from halo_cluster.cluster.deployments import Deployment, parse_deployments, shown
from halo_cluster.config import Config
from halo_cluster.errors import ParseError, StateError, UsageError
from halo_cluster.jsonout import JsonObject
from halo_cluster.transport import TransportPlan

SCHEMA = "halo.state/2"
CARRIED = ("halo.state/1",)  # older schemas read as they are (the fields they lack: empty)
MAX_STATE_BYTES = 16 << 20  # a few KiB per node


@dataclass
class NodeState:
    plan: TransportPlan
    ranks: int = 1  # engine ranks the node offers (GPUs, or one on a CPU-only node)


@dataclass
class ServedState:
    """What the last ``halo serve`` started (``nodes``, set at launch) and proved."""

    nodes: list[str]
    engine: str = engine_registry.DEFAULT
    model: str | None = None
    executor: str | None = None
    tp: int | None = None
    host: str | None = None
    port: int | None = None
    url: str | None = None
    ranks: list[dict[str, Any]] = field(default_factory=list)
    proven: str | None = None
    backend: str | None = None
    init_method: str | None = None
    bytes_per_token: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    started_at: float | None = None
    layout: str | None = None  # what ran where, "vllm tp2 on node1+node2"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServedState:
        """The record as written; a field of the wrong kind is a ValueError naming it."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        served = cls(**{"nodes": [], **known})
        kinds: dict[str, tuple[type, ...]] = {
            "nodes": (list,),
            "engine": (str,),
            "model": (str, type(None)),
            "layout": (str, type(None)),
            "executor": (str, type(None)),
            "host": (str, type(None)),
            "port": (int, type(None)),
            "ranks": (list,),
            "bytes_per_token": (dict,),
            "problems": (list,),
        }
        for name, kind in kinds.items():
            if not isinstance(getattr(served, name), kind) or isinstance(served.port, bool):
                raise ValueError(f"serve.{name} is {shown(getattr(served, name))}")
        if not all(isinstance(n, str) for n in served.nodes):
            raise ValueError(f"serve.nodes is {shown(served.nodes)}")
        if served.host is not None and served.host.startswith("-"):
            raise ValueError(f"serve.host is {shown(served.host)}")
        return served


@dataclass
class ClusterState:
    cluster: str
    head: str
    head_address: str
    nodes: dict[str, NodeState] = field(default_factory=dict)
    ray_started_at: float | None = None  # when 'halo up' started Ray; None: not by halo
    serve: ServedState | None = None
    deployments: list[Deployment] = field(default_factory=list)

    def deployment(self, name: str) -> Deployment | None:
        return next((d for d in self.deployments if d.name == name), None)

    def plans(self) -> dict[str, TransportPlan]:
        return {name: entry.plan for name, entry in self.nodes.items()}

    def capacity(self) -> dict[str, int]:
        return {name: entry.ranks for name, entry in self.nodes.items()}

    def to_dict(self) -> JsonObject:
        return {
            "schema": SCHEMA,
            "cluster": self.cluster,
            "head": self.head,
            "head_address": self.head_address,
            "started_at": self.ray_started_at,
            "nodes": {
                name: {"plan": e.plan.to_dict(), "ranks": e.ranks} for name, e in self.nodes.items()
            },
            **({"serve": asdict(self.serve)} if self.serve is not None else {}),
            "deployments": [d.to_dict() for d in self.deployments],
        }


def new_state(config: Config) -> ClusterState:
    return ClusterState(config.name, config.head.name, config.head.address)


def state_path(config: Config) -> Path:
    return config.path.parent / ".halo" / f"{config.name}.state.json"


def read_state(config: Config) -> ClusterState | None:
    """The state file (None when there is none); another schema or garbage: StateError."""
    path = state_path(config)
    if not os.path.lexists(path):
        return None
    text = read_text(path, MAX_STATE_BYTES, "a halo state file", StateError)
    try:
        return _parse(loads(text))
    except (ValueError, ParseError) as err:
        raise StateError(
            f"{path}: not a {SCHEMA} state file halo can read ({err}): "
            "remove it, then run 'halo up' (or 'halo serve') again"
        ) from None


def _parse(data: Any) -> ClusterState:
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("schema") != SCHEMA and data.get("schema") not in CARRIED:
        raise ValueError(f"its schema is {data.get('schema')!r}")
    try:
        nodes = {
            str(name): NodeState(TransportPlan.from_dict(e["plan"]), int(e.get("ranks", 1)))
            for name, e in data.get("nodes", {}).items()
        }
        served = data.get("serve")
        return ClusterState(
            str(data["cluster"]),
            str(data["head"]),
            str(data.get("head_address") or ""),
            nodes,
            _number(data.get("started_at")),
            ServedState.from_dict(served) if isinstance(served, dict) else None,
            parse_deployments(data.get("deployments")),
        )
    except (KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"missing or wrong field {err}") from None
    except ParseError as err:
        raise ValueError(str(err).replace("\n", " ")[:200]) from None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def write_state(config: Config, state: ClusterState) -> None:
    path = state_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(state.to_dict(), indent=2), prefix=".state.")


def named_deployment(state: ClusterState | None, name: str) -> Deployment:
    """Deployment ``name`` of ``state``; an unknown one is one line naming those there are."""
    found = state.deployment(name) if state else None
    if state is None or found is None:
        known = ", ".join(d.name for d in state.deployments) if state else ""
        raise UsageError(f"no deployment named {name!r} (deployments: {known or 'none'})")
    return found
