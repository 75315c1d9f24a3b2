"""The seam between halo's bring-up and an engine.

An engine is an object with the methods of ``Engine``; its module exposes it as ``ENGINE``
and ``engine_registry`` names the module. ``serving.bringup`` drives every engine the same
way: ``options`` (config table + flags -> one typed value), ``check`` (refusals that need
no node), ``prepare`` (checks on every node,
nothing started), ``start_plan`` (the processes to start, as a value that
``engines.process.run_plan`` runs and the supervisor replays), then /health, a warm-up request,
``witness`` (the engine's own words: its logs -> a verdict), and the counters witness, which
is the same for every engine. Any failure after the start stops every node.

The values an engine gets (``ServeRequest``, ``ServeContext``) and gives (``Prepared``,
``Witness``) are defined here, so an engine never reaches into the bring-up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from halo_cluster import engine_registry
from halo_cluster.client.node import NodeClient
from halo_cluster.config import Config, NodeConfig, ServeConfig
from halo_cluster.config.section import Section
from halo_cluster.engines.layout import Layout
from halo_cluster.engines.start import StartPlan
from halo_cluster.transport import TransportPlan
from halo_cluster.wire.recheck import Recheck

# the model files an engine serves (``Engine.model_format``), as people are told to give them
MODEL_FORMATS = {
    "hf": "a model directory (config.json beside the weights)",
    "gguf": "a .gguf file",
}


@dataclass(frozen=True)
class ServeRequest:
    """One ``halo serve``: the shared [serve] options with the flags applied, the model,
    and the engine's own options (the value its ``options`` returned)."""

    engine: str
    model: str
    serve: ServeConfig
    options: Any
    wait_s: float = 900.0
    allow_fallback: bool = False
    insecure: bool = False
    force: bool = False  # serve despite the doctor's blocking findings (no Ray: plans made now)
    nodes: int | None = None  # the layout: the first N nodes of the cluster (None: every node)
    reference: str = "auto"  # the token witness: auto, full, record, off (REFERENCE_MODES)
    # GiB other deployments' replicas hold on a node (the memory check counts them)
    held: Mapping[str, float] = field(default_factory=dict)


REFERENCE_MODES = ("auto", "full", "record", "off")


@dataclass(frozen=True)
class ServeContext:
    """What an engine may use during one start: the cluster, every node's client and plan,
    the engine ranks each node offers, the request, the API key (never logged)."""

    config: Config
    clients: Mapping[str, NodeClient]
    plans: Mapping[str, TransportPlan]
    capacity: Mapping[str, int]
    request: ServeRequest
    api_key: str | None = field(default=None, repr=False)
    ray_env: Mapping[str, str] = field(default_factory=dict, repr=False)  # Ray's token, if any
    progress: Callable[[str], None] = lambda _m: None

    @property
    def head(self) -> NodeConfig:
        return self.config.head

    def client(self, node: NodeConfig) -> NodeClient:
        return self.clients[node.name]


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` decided: the nodes that run a process of the engine (``members``,
    the head first), the nodes whose counters witness (``counted``: where the ranks run;
    default the members), whether the data path is RDMA, and the engine's own value."""

    members: list[NodeConfig]
    rdma: bool
    executor: str
    tp: int | None = None
    detail: Any = None
    counted: list[NodeConfig] | None = None

    @property
    def witnesses(self) -> list[NodeConfig]:
        return self.counted if self.counted is not None else self.members


@dataclass(frozen=True)
class Witness:
    """The engine's own words about where its traffic went."""

    expected: str  # "rdma" or "socket": what the plans asked for
    verdict: dict[str, Any]  # NCCL/RCCL's log (empty verdict when the engine has none)
    engine: dict[str, Any]  # the engine's lines: backend, rendezvous, RPC endpoints...
    ranks: list[dict[str, Any]]
    problems: list[str]
    transport: str  # what the engine's log shows when there are no problems
    summary: dict[str, Any] = field(default_factory=dict)  # kept in the state file
    # what the logs must show again after a restart (witness.logs), judged by the supervisor
    recheck: Recheck | None = None


@dataclass(frozen=True)
class ModelMemory:
    """What the model takes on each member, for the preflight's memory check (the planner's
    split: weights by each node's share, its KV cache). ``weights_bytes`` None: the size of
    ``size_path`` as read on node ``size_on`` (a file or a model directory, links followed).
    ``shares``: node -> its part of the weights; ``kv_bytes``: node -> its KV cache, where
    the engine can tell before it starts (``kv_note`` says how, or why not).
    ``weights_path``/``opened_on``: where the weights are read from, and on which nodes."""

    shares: dict[str, float]
    kv_bytes: dict[str, float]
    kv_note: str
    weights_bytes: float | None = None
    size_path: str | None = None
    size_on: str | None = None
    # the weights' path on the nodes that open them from it: on a unified-memory node the
    # page cache of that path is dropped before the start, and what stays is counted
    weights_path: str | None = None
    opened_on: tuple[str, ...] = ()


class Engine(Protocol):
    name: str
    member: str  # what one of its ranks is called in status lines: "rank", "rpc-server"
    # where the weights are opened: True, the head alone (it sends them on); False, every
    # node (each rank opens its shard): the nodes whose stores must hold a model served by name
    weights_on_head: bool
    # the engine's own options that halo sets, each with the halo option that does (refused
    # in [serve] extra_args, [serve.<engine>] args and 'halo serve … -- EXTRA')
    owned: Mapping[str, str]
    # the files it serves: "hf" (a model directory) or "gguf" (one GGUF file)
    model_format: str
    layout_examples: tuple[str, ...]  # its layouts' names for people: "TP2", "RPC2"

    def layouts(self, nodes: int, gpus: int, heads: int | None) -> list[Layout]:
        """The layouts it runs on exactly ``nodes`` nodes (``gpus`` per node; the model's
        attention heads, when known), in the order 'halo tune' tries them."""

    def layout(self, shape: str, gpus: int) -> Layout:
        """A layout read back from its shape (``Layout.shape``: "TP2", "RPC3"); a shape it
        does not run is a UsageError saying which it does."""

    def options(self, section: Section | None, flags: Mapping[str, Any]) -> Any:
        """The engine's typed options from its [serve.<engine>] table and the command-line
        flags (``tp``, ``executor``); a flag the engine does not take is a UsageError. Its
        ``args`` (the table's list of more options for the engine) are added after
        [serve] extra_args."""

    def check(self, config: Config, request: ServeRequest) -> None:
        """Refuse what no node needs to be asked about (a relative path, a missing address);
        runs before the plans are made."""

    def uses_ray(self, options: Any) -> bool:
        """Whether this start needs Ray running (its plans then come from ``halo up``)."""

    def prepare(self, ctx: ServeContext) -> Prepared:
        """Check every node that takes part (in parallel); start nothing."""

    def memory(self, ctx: ServeContext, prepared: Prepared) -> ModelMemory | None:
        """What the model will take on each member (None: the engine cannot tell)."""

    def start_plan(self, ctx: ServeContext, prepared: Prepared) -> StartPlan:
        """Which processes to start on its members (each with its own transport plan), in
        which order; starts nothing (``engines.process.run_plan`` runs it, the supervisor
        replays it)."""

    def witness(self, ctx: ServeContext, prepared: Prepared) -> Witness:
        """Read the engine's logs into a verdict checked against the plans."""

    def watches_ray(self, executor: str | None) -> bool:
        """Whether a served member is lost when its Ray is (else: when its process is)."""

    def label(self, executor: str | None) -> str:
        """How a running server of this engine is named in one line ("vLLM, mp executor")."""

    def named(self, name: str) -> tuple[str, ...]:
        """Its own options that make it answer to ``name`` as a model id (a deployment
        behind the gateway, which routes by the model a request names)."""

    def describe(self, engine: Mapping[str, Any]) -> list[str]:
        """Lines for people about the engine's own witness (``Witness.engine``)."""


def every_engine() -> list[Engine]:
    """Every engine ``engine_registry`` names, in its order (each module imported now)."""
    return [find_engine(name) for name in engine_registry.names()]


def format_hint(engines: list[Engine]) -> str:
    """Which files each engine serves, for an error line: "vllm: a model directory …"."""
    return "; ".join(f"{e.name}: {MODEL_FORMATS[e.model_format]}" for e in engines)


def find_engine(name: str) -> Engine:
    """The engine called ``name`` in ``engine_registry``, its module imported now."""
    import importlib

    found: Engine = importlib.import_module(engine_registry.module_of(name)).ENGINE
    return found
