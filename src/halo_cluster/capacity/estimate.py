"""Memory and decode-time model (pure arithmetic; see docs/plan.md).

Decode is memory-bound on these machines: a step reads every weight it uses once (shared by
the whole batch) plus the KV cache of every sequence, at the share of the memory bandwidth
the engine achieves, and pays the engine's fixed cost per layer. Tensor parallelism (vLLM)
splits those reads across ranks but adds 2·L + 2 all-reduces of batch × hidden activations
per step; pipeline parallelism and llama.cpp's RPC layer split do not split a token's reads
(stages run one after another) but only pass activations between stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from halo_cluster import engine_registry
from halo_cluster.capacity.calibration import Calibration
from halo_cluster.capacity.engines import Efficiency, Engine, find_engine
from halo_cluster.capacity.params import (
    experts_touched,
)
from halo_cluster.capacity.quants import find_quant
from halo_cluster.capacity.spec import Hardware, Link, ModelSpec
from halo_cluster.capacity.weights import WeightBytes, from_quant
from halo_cluster.errors import UsageError
from halo_cluster.jsonout import JsonObject

GIB = 2**30
ACTIVATION_BYTES = 2  # activations and all-reduce payloads stay in bf16
KV_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}


def weight_bytes(m: ModelSpec, quant: str, experts_per_layer: float | None = None) -> float:
    """Bytes of weights in format ``quant``: all of them, or what a step reads when it
    routes to ``experts_per_layer`` experts (then the embedding table is not read)."""
    weights = from_quant(m, find_quant(quant))
    if experts_per_layer is None:
        return weights.total
    return weights.read(experts_per_layer)


def kv_bytes_per_token(m: ModelSpec, tp: int, pp: int, kv_dtype: str = "bf16") -> float:
    """KV cache of one token on one rank. KV heads split over TP down to one head per rank
    (then replicated); MLA's compressed latent is replicated on every TP rank; linear
    attention layers (Qwen3-Next) keep a fixed state instead of a KV cache."""
    layers = m.attention_layers / pp
    if m.is_mla:
        return layers * (m.kv_lora_rank + m.qk_rope_head_dim) * KV_BYTES[kv_dtype]
    heads = max(1.0, m.kv_heads / tp)
    return layers * 2 * heads * m.head_dim * KV_BYTES[kv_dtype]


def allreduce_s(size_bytes: float, ranks: int, link: Link) -> float:
    """Ring all-reduce: 2(n−1) steps of α plus 2(n−1)/n of the data over β."""
    if ranks <= 1:
        return 0.0
    steps = 2 * (ranks - 1)
    return steps * link.alpha_us * 1e-6 + steps / ranks * size_bytes * 8 / (link.beta_gbps * 1e9)


def p2p_s(size_bytes: float, link: Link) -> float:
    return link.alpha_us * 1e-6 + size_bytes * 8 / (link.beta_gbps * 1e9)


def tp_collectives_per_token(m: ModelSpec) -> int:
    """Two all-reduces per layer (after attention, after the MLP) plus embedding and logits."""
    return 2 * m.layers + 2


def tp2_collective_s(token_s: float, tp2_s: float, read_bytes: float, req: Request) -> float:
    """The fixed cost of one tensor-parallel collective at two ranks: what a TP=2 decode
    step (``tp2_s``) takes beyond its compute — half the bytes of the one-node step
    (``token_s``), the same cost per layer (the planner does not split it) — and beyond each
    all-reduce's wire time on the request's link, spread over the step's collectives."""
    read_s = read_bytes / (req.hardware.memory_bw_gbs * 1e9)
    compute = read_s / 2 + max(0.0, token_s - read_s)
    wire = allreduce_s(req.model.hidden * ACTIVATION_BYTES, 2, req.link)
    return max(0.0, (tp2_s - compute) / tp_collectives_per_token(req.model) - wire)


def _default_engine() -> Engine:
    return find_engine(engine_registry.DEFAULT)


@dataclass(frozen=True)
class Request:
    model: ModelSpec
    hardware: Hardware
    link: Link
    nodes: int = 2
    gpus_per_node: int = 1
    quant: str = "bf16"
    context: int = 8192
    batch: int = 1
    gpu_memory_utilization: float | None = None  # None: the engine's own share
    kv_dtype: str = "bf16"
    engine: Engine = field(default_factory=_default_engine)
    weights: WeightBytes | None = None  # None: the catalog shape in format ``quant``
    calibration: Calibration | None = None

    def resolved_weights(self) -> WeightBytes:
        if self.weights is not None:
            return self.weights
        source = "catalog" if self.quant == self.model.dtype else "quant"
        return from_quant(self.model, find_quant(self.quant), source)

    def memory_fraction(self) -> float:
        if self.gpu_memory_utilization is not None:
            return self.gpu_memory_utilization
        return self.engine.memory_fraction


@dataclass(frozen=True)
class Row:
    layout: str
    tp: int
    pp: int
    link: str
    fits: bool
    weights_gib_per_node: float
    kv_gib_per_node: float
    max_context: int
    decode_ms_compute: float
    decode_ms_network: float
    tokens_per_s: float
    network_share: float
    tokens_per_s_batch1: float
    engine: str
    tokens_per_s_low: float
    tokens_per_s_high: float
    weights_source: str
    efficiency_source: str
    # copies of the layout, each on its own nodes behind the gateway (capacity/replicas.py);
    # 1: the layout alone on the cluster
    replicas: int = 1
    note: str | None = None  # how a replica row's figures were computed

    def to_dict(self) -> JsonObject:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def layouts(ranks: int) -> list[tuple[int, int]]:
    return [(tp, ranks // tp) for tp in range(ranks, 0, -1) if ranks % tp == 0]


def engine_layouts(req: Request) -> list[tuple[str, int, int]]:
    """(name, tp, pp) of every layout the engine can run on these nodes."""
    if req.engine.rpc is not None:  # llama.cpp: one node, or a layer split over RPC
        if req.nodes == 1:
            return [("single", 1, 1)]
        return [(f"RPC{req.nodes}", 1, req.nodes)]
    rows = []
    for tp, pp in layouts(req.nodes * req.gpus_per_node):
        if req.model.heads % tp:  # vLLM splits the attention heads evenly over TP ranks
            continue
        rows.append((f"TP{tp}" if pp == 1 else f"PP{pp}" if tp == 1 else f"TP{tp}xPP{pp}", tp, pp))
    return rows


def efficiency(req: Request) -> Efficiency:
    """The engine's bandwidth share for this model (dense or MoE), or the calibrated one."""
    if req.calibration is not None:
        return calibrated(req, req.calibration)
    tuning = req.engine.tuning(req.hardware)
    return tuning.moe if req.model.is_moe else tuning.dense


def fixed_seconds(req: Request) -> float:
    """The engine's fixed cost of a step: per layer, and more per gated delta-net layer."""
    tuning, m = req.engine.tuning(req.hardware), req.model
    linear = m.layers - m.attention_layers
    return (m.layers * tuning.per_layer_us + linear * tuning.per_linear_layer_us) * 1e-6


def _read_bytes(req: Request, tp: int, pp: int, batch: int, context: int) -> float:
    m = req.model
    read = req.resolved_weights().read(experts_touched(m, batch)) / tp
    # stages run one after another; each sequence reads the KV of its average context
    return read + kv_bytes_per_token(m, tp, pp, req.kv_dtype) * pp * context / 2 * batch


def network_seconds(req: Request, tp: int, pp: int, batch: int) -> float:
    m, link = req.model, req.link
    payload = batch * m.hidden * ACTIVATION_BYTES
    protocol = req.engine.rpc
    if protocol is not None:
        return sum(rpc_stages(req, pp, batch))
    network = 0.0
    if tp > req.gpus_per_node:  # TP group spans nodes
        fixed = collective_fixed_s(req, tp)
        network += tp_collectives_per_token(m) * (allreduce_s(payload, tp, link) + fixed)
    cross_stage = min(pp - 1, req.nodes - 1) if tp <= req.gpus_per_node else pp - 1
    return network + cross_stage * p2p_s(payload, link)


def collective_fixed_s(req: Request, ranks: int) -> float:
    """The fixed cost of one all-reduce among ``ranks`` beyond its wire: the engine's own
    work, once per further rank (``per_collective_us`` is the two-rank figure). On nodes
    that share cores with a measured bare all-reduce (the lab), the two-rank figure is split
    into the collective library's wait at two ranks and the engine's own work, and the wait
    at ``ranks`` is the measured one (interpolated between the rank counts measured)."""
    tuning = req.engine.tuning(req.hardware)
    measured = tuning.shared_core_allreduce_us
    if req.hardware.shared_cores <= 0 or not measured:
        return (ranks - 1) * tuning.per_collective_us * 1e-6
    wait_two = shared_wait_us(measured, 2)
    own = max(0.0, tuning.per_collective_us - wait_two)
    return ((ranks - 1) * own + shared_wait_us(measured, ranks)) * 1e-6


def shared_wait_us(measured: tuple[tuple[int, float], ...], ranks: int) -> float:
    """The measured wait at ``ranks`` from (ranks, µs) points of distinct, ascending rank
    counts: linear between the two points around it, along the nearest two outside them,
    never below zero."""
    if len(measured) == 1:
        return measured[0][1]
    i = 1
    while i < len(measured) - 1 and measured[i][0] < ranks:
        i += 1
    (n0, u0), (n1, u1) = measured[i - 1], measured[i]
    return max(0.0, u0 + (u1 - u0) / (n1 - n0) * (ranks - n0))


def ranks_per_node(req: Request) -> int:
    """How many of a layout's ranks one node holds: its GPUs, one for llama.cpp over RPC."""
    return req.gpus_per_node if req.engine.rpc is None else 1


def rpc_stages(req: Request, pp: int, batch: int) -> list[float]:
    """Seconds each remote stage of a llama.cpp RPC split adds to a decode step: its round
    trips and bytes over the link, and the engine's fixed cost per stage (on nodes that share
    cores, a worker on the head's own core has its own). On a CPU-only head the last worker
    holds the output layer and returns the logits."""
    m, link, protocol = req.model, req.link, req.engine.rpc
    assert protocol is not None
    tuning = req.engine.tuning(req.hardware)
    cores = req.hardware.shared_cores
    stages = []
    for index in range(req.nodes - 1):
        last = index == req.nodes - 2
        returned = m.vocab if last and req.hardware.cpu_only else 0
        wire = protocol.stage_seconds(
            m.hidden,
            m.layers / pp,
            batch,
            req.context // 2,
            link.alpha_us,
            link.beta_gbps,
            returned,
        )
        # nodes that share cores: node i (the head is node 0) runs on core i % cores
        shared = cores > 0 and (index + 1) % cores == 0
        if shared and tuning.per_stage_shared_core_us is not None:
            fixed = tuning.per_stage_shared_core_us
        else:
            fixed = tuning.stage_us(link.stack)
        stages.append(wire + fixed * 1e-6)
    return stages


def shared_core_factor(req: Request, tp: int) -> float:
    """How much slower each rank computes when the nodes share the machine's cores (the
    lab): ranks that outnumber the cores take turns."""
    cores = req.hardware.shared_cores
    if cores <= 0 or tp <= cores:
        return 1.0
    return float(-(-tp // cores))


def step_seconds(
    req: Request, tp: int, pp: int, batch: int, share: float | None = None
) -> tuple[float, float]:
    """(memory-bound compute, network) seconds of one decode step for ``batch`` sequences,
    at bandwidth share ``share`` (default: the engine's central efficiency)."""
    share = efficiency(req).central if share is None else share
    bandwidth = req.hardware.memory_bw_gbs * 1e9 * share
    compute = _read_bytes(req, tp, pp, batch, req.context) / bandwidth
    compute += fixed_seconds(req)
    compute *= shared_core_factor(req, tp)
    return compute, network_seconds(req, tp, pp, batch)


def calibrated(req: Request, cal: Calibration) -> Efficiency:
    """The bandwidth share that makes one node of this engine decode this model at the
    measured speed (batch 1, the measurement's average context)."""
    bandwidth = req.hardware.memory_bw_gbs * 1e9
    read = _read_bytes(req, 1, 1, 1, cal.context)
    fixed = fixed_seconds(req)

    def share(rate: float) -> float:
        left = 1 / rate - fixed
        if left <= 0:  # faster than the engine's fixed cost allows: all of it is bandwidth
            left = 1 / rate
        return read / bandwidth / left

    central = share(cal.tokens_per_s)
    if central > 1:
        raise UsageError(
            f"{cal.path}: {cal.tokens_per_s:g} tok/s would read "
            f"{central * req.hardware.memory_bw_gbs:.0f} GB/s, more than the hardware's "
            f"{req.hardware.memory_bw_gbs:g} GB/s: was it measured with this model and --quant?"
        )
    low, high = share(cal.tokens_per_s_low), min(1.0, share(cal.tokens_per_s_high))
    return Efficiency(central, low, high, cal.label)


def _memory(req: Request, tp: int, pp: int) -> tuple[float, float, int, bool]:
    """(weights per rank, KV per token per rank, max context, fits) in bytes/tokens."""
    m, hw = req.model, req.hardware
    weights_rank = req.resolved_weights().total / (tp * pp)
    usable = min(hw.usable_memory_gib, hw.memory_gib) * GIB * req.memory_fraction()
    kv_budget = usable / req.gpus_per_node - weights_rank - req.engine.headroom_gib * GIB
    kv_token = kv_bytes_per_token(m, tp, pp, req.kv_dtype)
    max_context = int(max(0.0, kv_budget) / kv_token / req.batch) if kv_token else 0
    if m.context_limit:
        max_context = min(max_context, m.context_limit) if kv_budget > 0 else 0
    fits = kv_budget > 0 and max_context >= req.context
    return weights_rank, kv_token, max_context, fits


def evaluate(req: Request, tp: int, pp: int, layout: str | None = None) -> Row:
    weights_rank, kv_token, max_context, fits = _memory(req, tp, pp)
    eff = efficiency(req)
    compute, network = step_seconds(req, tp, pp, req.batch, eff.central)
    compute1, network1 = step_seconds(req, tp, pp, 1, eff.central)
    slow = step_seconds(req, tp, pp, req.batch, eff.low)[0]
    fast = step_seconds(req, tp, pp, req.batch, eff.high)[0]
    step = compute + network
    per_node = ranks_per_node(req)
    return Row(
        layout=layout or (f"TP{tp}" if pp == 1 else f"PP{pp}" if tp == 1 else f"TP{tp}xPP{pp}"),
        tp=tp,
        pp=pp,
        link=req.link.id,
        fits=fits,
        weights_gib_per_node=weights_rank * per_node / GIB,
        kv_gib_per_node=kv_token * req.context * req.batch * per_node / GIB,
        max_context=max_context,
        decode_ms_compute=compute * 1e3,
        decode_ms_network=network * 1e3,
        tokens_per_s=req.batch / step,
        network_share=network / step,
        tokens_per_s_batch1=1 / (compute1 + network1),
        engine=req.engine.id,
        tokens_per_s_low=req.batch / (slow + network),
        tokens_per_s_high=req.batch / (fast + network),
        weights_source=req.resolved_weights().source,
        efficiency_source=eff.source,
    )


def layout_rows(req: Request) -> list[Row]:
    return [evaluate(req, tp, pp, name) for name, tp, pp in engine_layouts(req)]


def recommend(rows: list[Row]) -> tuple[Row | None, str]:
    fitting = [r for r in rows if r.fits]
    if not fitting:
        best = max(rows, key=lambda r: r.max_context) if rows else None
        return None, "no layout fits: quantise further, shorten the context or add nodes" + (
            f" (closest: {best.layout}, max context {best.max_context})" if best else ""
        )
    best = max(fitting, key=lambda r: r.tokens_per_s)
    return best, (
        f"{best.layout} over {best.link}: {best.tokens_per_s:.1f} tok/s "
        f"({best.tokens_per_s_low:.1f}–{best.tokens_per_s_high:.1f}), network "
        f"{best.network_share:.1%} of each step, max context {best.max_context}"
    )


@dataclass(frozen=True)
class Step:
    """The cluster at one node count: its fastest fitting layout (or the one that comes
    closest), and what the added node changed."""

    nodes: int
    layout: str
    fits: bool
    tokens_per_s_batch1: float
    tokens_per_s: float
    decode_ms_compute_batch1: float
    decode_ms_network_batch1: float
    ratio_batch1: float | None  # decode speed relative to one node fewer
    ratio: float | None  # the same at --batch
    verdict: str  # faster, slower, fits (only now), capacity (fits, slower), same

    def to_dict(self) -> JsonObject:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def node_steps(req: Request) -> list[Step]:
    """From one node to ``req.nodes``: each count's fastest fitting layout, and whether
    adding that node made decode faster or slower at batch 1 and at ``req.batch``."""
    from dataclasses import replace

    steps: list[Step] = []
    for count in range(1, req.nodes + 1):
        here = replace(req, nodes=count)
        rows = layout_rows(here)
        fitting = [r for r in rows if r.fits]
        best = max(fitting or rows, key=lambda r: (r.tokens_per_s, r.max_context))
        compute1, network1 = step_seconds(here, best.tp, best.pp, 1)
        prev = steps[-1] if steps else None
        ratio1 = best.tokens_per_s_batch1 / prev.tokens_per_s_batch1 if prev else None
        ratio = best.tokens_per_s / prev.tokens_per_s if prev else None
        if prev is None:
            verdict = "fits" if best.fits else "does not fit"
        elif best.fits and not prev.fits:
            verdict = "fits"
        elif not best.fits:
            verdict = "does not fit"
        elif ratio1 is not None and ratio1 > 1.02:
            verdict = "faster"
        elif ratio1 is not None and ratio1 < 0.98:
            verdict = "capacity"
        else:
            verdict = "same"
        steps.append(
            Step(
                count,
                best.layout,
                best.fits,
                best.tokens_per_s_batch1,
                best.tokens_per_s,
                compute1 * 1e3,
                network1 * 1e3,
                ratio1,
                ratio,
                verdict,
            )
        )
    return steps


def step_sentence(step: Step, prev: Step, batch: int, link: str) -> str:
    """One line: what the ``step.nodes``-th node does to decode, and why."""
    added = step.decode_ms_network_batch1 - prev.decode_ms_network_batch1
    saved = prev.decode_ms_compute_batch1 - step.decode_ms_compute_batch1
    at_batch = (
        f" ({step.ratio:.2f}× at batch {batch})" if batch > 1 and step.ratio is not None else ""
    )
    head = f"the {_ordinal(step.nodes)} node ({step.layout})"
    if step.verdict == "does not fit":
        return f"{head}: the model still does not fit"
    if step.verdict == "fits" and not prev.fits:
        more = f", {step.tokens_per_s:.1f} at batch {batch}" if batch > 1 else ""
        return (
            f"{head}: the model fits only from here; {step.tokens_per_s_batch1:.1f} tok/s "
            f"at batch 1{more}"
        )
    why = f"it adds {added:.2f} ms of network per token over {link}"
    if saved > 0.005:
        why += f" and saves {saved:.2f} ms of compute"
    change = f"decode {step.ratio_batch1:.2f}× of {prev.nodes} node{'s' if prev.nodes > 1 else ''}"
    if step.verdict == "faster":
        return f"{head}: {change}{at_batch}, faster: {why}"
    if step.verdict == "capacity":
        return f"{head}: {change}{at_batch}, slower: {why}; worth it only for capacity"
    return f"{head}: {change}{at_batch}, about the same: {why}"


def one_node_parts(req: Request) -> tuple[float, float]:
    """(bytes one decode step of one node reads at batch 1, seconds one llama.cpp RPC stage
    spends on ``req.link``'s round trips and bytes without the engine's fixed cost): what a
    profile subtracts from its one-node runs."""
    read = _read_bytes(req, 1, 1, 1, req.context)
    protocol = req.engine.rpc
    if protocol is None:
        return read, 0.0
    m, link = req.model, req.link
    wire = protocol.stage_seconds(
        m.hidden,
        m.layers / 2,
        1,
        req.context // 2,
        link.alpha_us,
        link.beta_gbps,
        m.vocab if req.hardware.cpu_only else 0,
    )
    return read, wire
