"""The preflight's memory check: before anything starts, each member's available memory
(MemAvailable, read there now) against what the model will take on it: its share of the
weights and its KV cache (``engines.protocol.ModelMemory``, the planner's split). A node that
lacks it is refused, naming what it has and what it needs, before a load that would swap or
freeze a unified-memory box. ``--force`` serves anyway.

The weights come from the engine (read from the model here) or from the size of the model's
file or directory on the node that holds it; the KV cache where the engine can tell before it
starts (llama.cpp's from the GGUF header and its context, vLLM's CPU build from
VLLM_CPU_KVCACHE_SPACE). Nothing is guessed: an unreadable value leaves that node unchecked,
and the progress says so.

Where other deployments already serve on a node (``ServeRequest.held``: what each one's
replicas were checked to need there), their share is counted too, against the node's whole
memory (MemTotal): a model that mmaps its weights leaves them in MemAvailable as page
cache, so MemAvailable alone would let a second deployment onto memory the first relies on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from halo_cluster.checks.memory_owners import (
    LARGE_SHARE,
    NAMED_SHARE,
    HostMemory,
    MemoryOwner,
    owner_line,
    parse_owners,
)
from halo_cluster.client.fanout import each
from halo_cluster.config import NodeConfig
from halo_cluster.engines import scripts
from halo_cluster.engines.protocol import ModelMemory, Prepared, ServeContext
from halo_cluster.errors import LifecycleError, UsageError
from halo_cluster.jsonout import JsonObject
from halo_cluster.supervision import count, key_values

GIB = 1024**3


@dataclass(frozen=True)
class NodeMemory:
    node: str
    available_bytes: int | None
    weights_bytes: float | None
    kv_bytes: float
    total_bytes: int | None = None
    held_bytes: float = 0.0  # what other deployments' replicas were checked to need here
    owners: tuple[MemoryOwner, ...] = ()  # the processes that hold the most of it
    # the model's pages in the page cache: dropped before the start on a unified-memory
    # node that opens the weights; bytes cached before and after (None: not counted there)
    dropped: bool = False
    cached_before: int | None = None
    cached_bytes: int | None = None

    def foreign(self, share: float, ray: bool = True) -> list[MemoryOwner]:
        """The owners halo did not start holding at least ``share`` of the node's memory,
        largest first (Ray's processes too unless ``ray``: they may be halo's own Ray's)."""
        total = None if self.total_bytes is None else self.total_bytes // 1024
        return HostMemory(total, self.owners).large(share, ray)  # the doctor's rule too

    @property
    def need_bytes(self) -> float | None:
        return None if self.weights_bytes is None else self.weights_bytes + self.kv_bytes

    @property
    def usable_bytes(self) -> int | None:
        """What the engine's load may take: the available memory, less the model's pages
        still cached after the drop (on unified memory the GPU's allocations do not reclaim
        them, and the load reads the same bytes again)."""
        have = self.available_bytes
        return None if have is None else max(0, have - (self.cached_bytes or 0))

    @property
    def short(self) -> bool:
        need, have = self.need_bytes, self.usable_bytes
        return need is not None and have is not None and need > have

    @property
    def over_total(self) -> bool:
        """Together with the other deployments here, more than the node's memory."""
        need, total = self.need_bytes, self.total_bytes
        return (
            bool(self.held_bytes)
            and need is not None
            and total is not None
            and (need + self.held_bytes > total)
        )

    def to_dict(self) -> JsonObject:
        return {
            "available_gib": _gib(self.available_bytes),
            "weights_gib": _gib(self.weights_bytes),
            "kv_gib": _gib(self.kv_bytes),
            "need_gib": _gib(self.need_bytes),
            "owners": [o.to_dict() for o in self.foreign(NAMED_SHARE)],
            "page_cache": {
                "dropped": self.dropped,
                "before_gib": _gib(self.cached_before),
                "cached_gib": _gib(self.cached_bytes),
            },
        }

    def cache_line(self) -> str | None:
        """What the drop did here, for the progress (None where nothing was dropped)."""
        if not self.dropped:
            return None
        if self.cached_before is None or self.cached_bytes is None:
            return f"{self.node}: the model's pages dropped (no fincore there: not counted)"
        gone = max(0, self.cached_before - self.cached_bytes)
        return (
            f"{self.node}: {gone / GIB:.2f} GiB of the model's pages dropped, "
            f"{self.cached_bytes / GIB:.2f} GiB still cached (counted as taken)"
        )


def _gib(value: float | None) -> float | None:
    return None if value is None else round(value / GIB, 2)


def per_node(
    memory: ModelMemory,
    answers: dict[str, str],
    weights: float | None,
    held: Mapping[str, float] | None = None,
) -> list[NodeMemory]:
    """Each member's available and total memory (from its answer), its need, and what
    other deployments hold there (pure)."""
    found = []
    for node, share in memory.shares.items():
        said = key_values(answers.get(node, ""))
        kib, total = count(said.get("mem_available_kib")), count(said.get("mem_total_kib"))
        found.append(
            NodeMemory(
                node,
                None if kib is None else kib * 1024,
                None if weights is None else weights * share,
                memory.kv_bytes.get(node, 0.0),
                None if total is None else total * 1024,
                (held or {}).get(node, 0.0),
                tuple(parse_owners(answers.get(node, ""))),
                said.get("dropped") == "1",
                count(said.get("cached_before")),
                count(said.get("cached_bytes")),
            )
        )
    return found


def refusal(rows: list[NodeMemory], kv_note: str) -> str:
    """The one line that refuses the start ('' when every node has what it needs): a node
    short of memory (with what holds the most of it), or one where a process halo did not
    start holds a large share of it."""
    short = [r for r in rows if r.short or r.over_total]
    if not short:
        held = [(r, o) for r in rows for o in r.foreign(LARGE_SHARE, ray=False)]
        if not held:
            return ""
        return (
            "memory held by another owner: "
            + "; ".join(f"{r.node}: {owner_line(o, (r.total_bytes or 0) // 1024)}" for r, o in held)
            + "; or --force to start beside it"
        )
    parts = []
    for row in short:
        assert row.weights_bytes is not None
        what = (
            f"{(row.need_bytes or 0) / GIB:.2f} GiB there "
            f"({row.weights_bytes / GIB:.2f} GiB of weights + {row.kv_bytes / GIB:.2f} GiB of "
            "KV cache)"
        )
        if row.short:
            assert row.available_bytes is not None
            owners = [owner_line(o, (row.total_bytes or 0) // 1024)
                      for o in row.foreign(NAMED_SHARE)[:3]]  # fmt: skip
            cached = (
                f" ({row.cached_bytes / GIB:.2f} GiB of it the model's pages still cached)"
                if row.cached_bytes else ""
            )  # fmt: skip
            parts.append(
                f"{row.node} has {row.available_bytes / GIB:.2f} GiB available{cached}, the "
                f"model needs {what}" + "".join(f" ({line})" for line in owners)
            )
        else:
            assert row.total_bytes is not None
            free = max(0.0, row.total_bytes - row.held_bytes)
            parts.append(
                f"{row.node} has {row.total_bytes / GIB:.2f} GiB, other deployments hold "
                f"{row.held_bytes / GIB:.2f} GiB of it ({free / GIB:.2f} GiB free), the model "
                f"needs {what}"
            )
    why = f" ({kv_note})" if kv_note else ""
    return (
        "not enough memory: " + "; ".join(parts) + why + ": free memory there, lower "
        "max_model_len, spread the model over more nodes ('halo plan'), or --force"
    )


def check(
    ctx: ServeContext, prepared: Prepared, memory: ModelMemory | None, force: bool
) -> list[NodeMemory]:
    """Ask every member for its available memory (and the model's size where it is read
    there); refuse the start when one lacks what the model takes there."""
    if memory is None:
        ctx.progress("memory: not checked (the engine cannot tell what the model takes)")
        return []
    by_name = {n.name: n for n in ctx.config.nodes}

    def ask(node: NodeConfig) -> tuple[str, str]:
        path = memory.size_path if node.name == memory.size_on else None
        plan = ctx.plans.get(node.name)
        unified = plan is not None and plan.apu and node.name in memory.opened_on
        drop = memory.weights_path if unified else None
        result = ctx.client(node).script(scripts.memory_script(path, drop), 30)
        if not result.ok:
            raise LifecycleError(f"{node.name}: cannot read its memory: {result.error_text()}")
        return node.name, result.stdout

    names = dict.fromkeys([*memory.shares, *([memory.size_on] if memory.size_on else [])])
    answers = dict(each([by_name[name] for name in names], ask))
    weights = memory.weights_bytes
    if weights is None and memory.size_on:
        weights = count(key_values(answers.get(memory.size_on, "")).get("model_bytes"))
    held = {name: gib * GIB for name, gib in ctx.request.held.items()}
    rows = per_node(memory, answers, None if weights is None else float(weights), held)
    for said in filter(None, (row.cache_line() for row in rows)):
        ctx.progress(f"page cache: {said}")
    line = refusal(rows, memory.kv_note)
    unchecked = [r.node for r in rows if r.need_bytes is None or r.available_bytes is None]
    if unchecked:
        ctx.progress(f"memory: not checked on {', '.join(unchecked)} (size or memory unreadable)")
    if line and not force:
        raise UsageError(line)
    if line:
        ctx.progress(f"--force: serving anyway: {line}")
    else:
        ctx.progress(
            "memory: "
            + ", ".join(
                f"{r.node} needs {(r.need_bytes or 0) / GIB:.2f} of "
                f"{(r.available_bytes or 0) / GIB:.1f} GiB available"
                for r in rows
                if r.node not in unchecked
            )
            + (f" ({memory.kv_note})" if memory.kv_note else "")
        )
    return rows
