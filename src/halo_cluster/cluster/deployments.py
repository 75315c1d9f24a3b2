"""The deployments the cluster serves (pure): each a named model on an engine and a layout,
with one or more replicas, each replica on its own nodes and port. A replica is served as
its own *unit*: the cluster narrowed to the replica's nodes under the name
``<cluster>.<deployment>.<index>``, so its processes, supervisor, state and token proof are
the bring-up's own (``deploy/``). This is the list the state file (``halo.state/2``) holds;
``from_dict`` is its one parser, a field of the wrong kind a ValueError naming it (and
showing at most a few dozen characters of what it found: a state file may hold megabytes of
garbage)."""

from __future__ import annotations

import re
import reprlib
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from halo_cluster.engine_registry import ENGINES
from halo_cluster.jsonout import JsonObject
from halo_cluster.netnames import NODE_NAME

if TYPE_CHECKING:
    from halo_cluster.config import NodeConfig

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")  # no '.': it separates a unit's parts
NAME_RULE = "1-32 letters, digits, '_' or '-', starting with a letter or digit"
ALIAS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")  # as [gateway] aliases takes it
MAX_TEXT = 4096  # a model's path or name
_SHOW = reprlib.Repr()
_SHOW.maxstring = _SHOW.maxother = 60
_SHOW.maxlist = _SHOW.maxdict = 4
_SHOW.maxlevel = 2


def shown(value: Any) -> str:
    """``value`` as an error shows it: a short repr, whatever its size."""
    return _SHOW.repr(value)


def _text(value: Any, what: str, limit: int = MAX_TEXT) -> str:
    """``value`` when it is one printable line of at most ``limit`` characters."""
    if not isinstance(value, str) or len(value) > limit or not value.isprintable():
        raise ValueError(f"{what} is {shown(value)}")
    return value


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a deployment (None when it can)."""
    return None if NAME.match(name) else f"use {NAME_RULE}"


def serve_address(node: NodeConfig) -> str:
    """Where a replica whose first node is ``node`` binds and is asked: its management
    address (the network SSH and the probes use, which the head and the controller reach;
    requests are small), else its cluster address."""
    return node.mgmt_address or node.address


def unit_name(cluster: str, deployment: str, index: int) -> str:
    """The name a replica is served under: its processes, supervisor and state file."""
    return f"{cluster}.{deployment}.{index}"


@dataclass(frozen=True)
class Replica:
    index: int
    nodes: tuple[str, ...]  # the first one serves the API
    port: int
    # what the memory check found it needs on each node (GiB), once served: the next
    # deployment on a shared node counts it
    memory_gib: tuple[tuple[str, float], ...] = ()

    def unit(self, cluster: str, deployment: str) -> str:
        return unit_name(cluster, deployment, self.index)

    def url(self, address: str) -> str:
        """Its API's URL, given its first node's ``serve_address``."""
        host = f"[{address}]" if ":" in address else address
        return f"http://{host}:{self.port}"

    def to_dict(self) -> JsonObject:
        return {
            "index": self.index,
            "nodes": list(self.nodes),
            "port": self.port,
            "memory_gib": dict(self.memory_gib),
        }

    @classmethod
    def from_dict(cls, data: Any) -> Replica:
        if not isinstance(data, dict):
            raise ValueError(f"a replica is {shown(data)}")
        index, nodes, port = data.get("index"), data.get("nodes"), data.get("port")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ValueError(f"replica.index is {shown(index)}")
        if (
            not isinstance(nodes, list)
            or not nodes
            or not all(isinstance(n, str) and NODE_NAME.fullmatch(n) for n in nodes)
            or len(set(nodes)) < len(nodes)
        ):
            raise ValueError(f"replica.nodes is {shown(nodes)}")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise ValueError(f"replica.port is {shown(port)}")
        memory = data.get("memory_gib", {})
        if not isinstance(memory, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            for v in memory.values()
        ):
            raise ValueError(f"replica.memory_gib is {shown(memory)}")
        return cls(index, tuple(nodes), port, tuple((str(k), float(v)) for k, v in memory.items()))


@dataclass(frozen=True)
class Deployment:
    """One named model served by ``halo run --name``: the model as given and as served (the
    path on the nodes' stores), its engine, layout and replicas."""

    name: str
    model: str
    engine: str
    layout: str  # the layout's name ("tp2", "rpc2"), as 'halo run --layout' takes it
    replicas: tuple[Replica, ...]
    served: str = ""  # what the engine was given (a store path, a file)
    created: float = 0.0
    aliases: tuple[str, ...] = field(default=())

    def nodes(self) -> set[str]:
        return {n for replica in self.replicas for n in replica.nodes}

    def to_dict(self) -> JsonObject:
        return {
            "name": self.name,
            "model": self.model,
            "engine": self.engine,
            "layout": self.layout,
            "served": self.served,
            "created": self.created,
            "aliases": list(self.aliases),
            "replicas": [r.to_dict() for r in self.replicas],
        }

    @classmethod
    def from_dict(cls, data: Any) -> Deployment:
        if not isinstance(data, dict):
            raise ValueError(f"a deployment is {shown(data)}")
        name, engine = data.get("name"), data.get("engine")
        if not isinstance(name, str) or name_problem(name) is not None:
            raise ValueError(f"deployment.name is {shown(name)}")
        if engine not in ENGINES:
            raise ValueError(
                f"deployment.engine is {shown(engine)} (halo knows {', '.join(ENGINES)})"
            )
        model = _text(data.get("model"), "deployment.model")
        layout = _text(data.get("layout"), "deployment.layout", 64)
        for key, value in (("model", model), ("layout", layout)):
            if not value or value.startswith("-"):  # never an engine's option
                raise ValueError(f"deployment.{key} is {shown(value)}")
        replicas, aliases = data.get("replicas"), data.get("aliases", [])
        if not isinstance(replicas, list) or not replicas:
            raise ValueError(f"deployment.replicas is {shown(replicas)}")
        if not isinstance(aliases, list) or not all(
            isinstance(a, str) and ALIAS.match(a) for a in aliases
        ):
            raise ValueError(f"deployment.aliases is {shown(aliases)}")
        created = data.get("created", 0.0)
        served = _text(data.get("served", ""), "deployment.served")
        if not isinstance(created, (int, float)) or isinstance(created, bool):
            raise ValueError(f"deployment.created is {shown(created)}")
        found = tuple(Replica.from_dict(r) for r in replicas)
        if len({r.index for r in found}) < len(found):
            raise ValueError(f"deployment {name}: two replicas have one index")
        return cls(name, model, engine, layout, found, served, float(created), tuple(aliases))


def parse_deployments(data: Any) -> list[Deployment]:
    """The state file's ``deployments`` list (absent: none); names are unique."""
    if data is None:
        return []
    if not isinstance(data, list):
        raise ValueError(f"deployments is {shown(data)}")
    found = [Deployment.from_dict(d) for d in data]
    counted = Counter(d.name for d in found)  # not names.count(): a list may be long
    twice = next((n for n in counted if counted[n] > 1), None)
    if twice is not None:
        raise ValueError(f"deployment {twice!r} appears twice")
    return found


def held_gib(deployments: list[Deployment], nodes: tuple[str, ...]) -> dict[str, float]:
    """What ``deployments``' replicas were checked to need on each of ``nodes`` (GiB)."""
    held: dict[str, float] = {}
    for deployment in deployments:
        for replica in deployment.replicas:
            for node, gib in replica.memory_gib:
                if node in nodes:
                    held[node] = held.get(node, 0.0) + gib
    return held
