"""Inference engines as data (capacity/data/engines/*.json): the layouts each can run, how much
of the memory it may use, and — per hardware — the share of the memory bandwidth a decode
step achieves (dense and MoE) and its fixed cost per layer, derived from the published
measurements named in the file (the calibration rows of capacity/data/field.json)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from halo_cluster import engine_registry
from halo_cluster.capacity.catalog import capacity_data
from halo_cluster.capacity.rpc import RpcProtocol
from halo_cluster.capacity.spec import Hardware
from halo_cluster.errors import UsageError


def _modelled(name: str) -> bool:
    """Whether the capacity planner models this engine (capacity/data/engines/<name>.json)."""
    from importlib import resources

    data = resources.files("halo_cluster.capacity").joinpath("data", "engines")
    return data.joinpath(f"{name}.json").is_file()


@dataclass(frozen=True)
class Efficiency:
    """Share of the memory bandwidth a decode step achieves, with the spread of the
    measurements it comes from."""

    central: float
    low: float
    high: float
    source: str


@dataclass(frozen=True)
class Tuning:
    """An engine on one hardware profile."""

    dense: Efficiency
    moe: Efficiency
    per_layer_us: float  # kernel launches and synchronisation, per layer and step
    per_linear_layer_us: float  # on top, per gated delta-net layer (Qwen3-Next): many small ops
    source: str
    # llama.cpp RPC: the fixed cost of one remote stage per token (the host scheduling the
    # split, synchronisation, serialisation), by the link's stack (tcp, rdma)
    per_stage_us: tuple[tuple[str, float], ...] = ()
    # tensor parallelism: the fixed cost of one all-reduce between two ranks beyond its two
    # ring steps of α (the collective library's own work); each further rank adds it again
    per_collective_us: float = 0.0
    # a stage whose worker shares the head's core (the lab): it runs as soon as the head
    # waits, on a core that was just busy; None: as any other stage
    per_stage_shared_core_us: float | None = None
    # nodes that share cores (the lab): a bare all-reduce among n ranks, beyond its wire,
    # measured at some rank counts ((ranks, µs), ascending): ranks that outnumber the cores
    # wait for one another on every hop
    shared_core_allreduce_us: tuple[tuple[int, float], ...] = ()

    def stage_us(self, stack: str) -> float:
        table = dict(self.per_stage_us)
        return table.get(stack, table.get("tcp", 0.0))


@dataclass(frozen=True)
class Engine:
    id: str
    name: str
    layouts: tuple[str, ...]  # "tp", "pp", "tpxpp" (vLLM); "single", "rpc" (llama.cpp)
    memory_fraction: float  # of the GPU-usable memory the engine lets itself allocate
    headroom_gib: float  # per rank: activations, compute buffers, runtime
    default_quant: str  # the format --weights-gib assumes without --quant
    pool_kinds: bool  # one efficiency for dense and MoE (too few measurements to split)
    release_formats: dict[str, str]  # a catalog release format -> what this engine loads
    tunings: dict[str, Tuning]
    rpc: RpcProtocol | None
    source: str

    def tuning(self, hw: Hardware) -> Tuning:
        """This engine on ``hw``; hardware without published measurements for this engine
        falls back to the hardware profile's own decode efficiency and no per-layer cost."""
        measured = dict(hw.measured)
        if self.id in measured:  # a profile halo measured on this machine
            return _tuning(measured[self.id])  # type: ignore[arg-type]
        if hw.id in self.tunings:
            return self.tunings[hw.id]
        fallback = Efficiency(
            hw.decode_efficiency,
            hw.decode_efficiency,
            hw.decode_efficiency,
            f"hardware profile {hw.id} (no published {self.id} measurements on it)",
        )
        return Tuning(fallback, fallback, 0.0, 0.0, fallback.source)


def _efficiency(entry: dict[str, Any]) -> Efficiency:
    return Efficiency(entry["efficiency"], entry["low"], entry["high"], entry["source"])


def _tuning(t: dict[str, Any]) -> Tuning:
    return Tuning(
        _efficiency(t["dense"]),
        _efficiency(t["moe"]),
        t["per_layer_us"],
        t["per_linear_layer_us"],
        t["source"],
        tuple(sorted(t.get("per_stage_us", {}).items())),
        t.get("per_collective_us", 0.0),
        t.get("per_stage_shared_core_us"),
        tuple(sorted((int(n), us) for n, us in t.get("shared_core_allreduce_us", {}).items())),
    )


def _engine(data: dict[str, Any]) -> Engine:
    tunings = {hw: _tuning(t) for hw, t in data["hardware"].items()}
    return Engine(
        id=data["id"],
        name=data["name"],
        layouts=tuple(data["layouts"]),
        memory_fraction=data["memory_fraction"],
        headroom_gib=data["headroom_gib"],
        default_quant=data["default_quant"],
        pool_kinds=data["pool_kinds"],
        release_formats=data["release_formats"],
        tunings=tunings,
        rpc=RpcProtocol(**data["rpc"]) if "rpc" in data else None,
        source=data["source"],
    )


@cache
def engines() -> dict[str, Engine]:
    """The capacity planner's model of every engine halo serves with (engine_registry) that it has
    data for."""
    return {
        name: _engine(capacity_data("engines", f"{name}.json"))
        for name in engine_registry.names()
        if _modelled(name)
    }


def find_engine(engine_id: str) -> Engine:
    table = engines()
    if engine_id not in table:
        raise UsageError(f"unknown engine {engine_id!r}; choose one of {', '.join(table)}")
    return table[engine_id]
