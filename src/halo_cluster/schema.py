"""The versioned benchmark results halo writes and reads (``halo.bench.<kind>/<version>``):
their shapes as TypedDicts, their kinds as a Literal, and the one validator every reader
uses (``halo results``/``report`` through bench/results.py, ``halo plan --link`` and
``--calibrate``, the exporter's latency baseline).

A bottom-layer module: the capacity planner (``halo plan``) reads results but must not
import the bench package. Every result is the run's body plus the stamp (bench/results.py
``stamp``). A result cut short carries ``incomplete`` (the reason) and the rows measured
until then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Optional, TypedDict, Union, get_args

from halo_cluster.errors import UsageError

Kind = Literal["net", "collective", "tp", "serve"]
KINDS: tuple[Kind, ...] = get_args(Kind)
VERSIONS: dict[Kind, int] = {"net": 1, "collective": 1, "tp": 1, "serve": 1}
SCHEMAS: dict[Kind, str] = {kind: f"halo.bench.{kind}/{VERSIONS[kind]}" for kind in KINDS}


class Stamp(TypedDict, total=False):
    """What every saved result carries besides its body."""

    schema: str
    kind: Kind
    created: str  # ISO 8601, UTC
    host: str
    versions: dict[str, str | None]
    plans: dict[str, Any]  # node -> TransportPlan.to_dict()
    nodes: dict[str, Any]  # node -> what the run knew of it
    incomplete: str  # why the run stopped early (absent when it did not)


# -- halo.bench.net/1 ------------------------------------------------------------------------
class Latency(TypedDict):
    p50: float
    p99: float | None
    avg: float | None
    samples: int | None
    tool: str


# the functional form evaluates its types: Optional, not X | None (Python 3.9 on nodes)
NetPath = TypedDict(
    "NetPath",
    {
        "node": str,
        "peer": str,
        "path": Literal["mgmt", "fabric", "rdma"],
        "transport": Literal["tcp", "rdma"],
        "from": str,
        "to": str,
        "latency_us": Optional[Latency],
        "bandwidth_gbps": Optional[float],
        "bandwidth_tool": str,
        "retransmits": Optional[int],
        "line_rate_gbps": Optional[float],
        "pcie_ceiling_gbps": Optional[float],
        "pct_line_rate": Optional[float],
        "pct_pcie": Optional[float],
        "errors": list[str],
    },
    total=False,
)


class Skipped(TypedDict):
    pair: str
    path: str
    reason: str


class NetBenchResult(Stamp):
    paths: list[NetPath]
    skipped: list[Skipped]


# -- halo.bench.collective/1 and halo.bench.tp/1 ---------------------------------------------
class Rank(TypedDict):
    rank: int
    node: str
    hostname: str
    gpus: int
    env: dict[str, str]


class SweepRow(TypedDict):
    bytes: int
    time_us: float
    algbw_gbs: float
    busbw_gbs: float


class Fit(TypedDict):
    alpha_us: float
    beta_gbps: float
    intercept_us: float
    max_rel_error: float


class RankedBenchResult(Stamp, total=False):
    backend: Literal["nccl", "gloo"]
    ranks: list[Rank]
    world_size: int
    transport: dict[str, Any]  # the verdict: backend, transport, evidence, ...


class CollectiveBenchResult(RankedBenchResult, total=False):
    iters: int
    sweep: list[SweepRow]
    fit: Fit | None


class TpRow(TypedDict):
    batch: int
    allreduces_per_token: int
    bytes_per_allreduce: int
    network_ms_per_token: float
    network_ms_p90: float
    tokens_per_s_ceiling: float | None
    per_sequence_tokens_per_s_ceiling: float | None


class TpModel(TypedDict):
    id: str
    name: str
    layers: int
    hidden: int


class TpBenchResult(RankedBenchResult, total=False):
    model: TpModel
    steps: int
    rows: list[TpRow]


# -- halo.bench.serve/1 ----------------------------------------------------------------------
class Percentiles(TypedDict, total=False):
    p50: float | None
    p90: float | None
    p99: float | None


class ServeLevel(TypedDict, total=False):
    concurrency: int
    requests: int
    errors: int
    first_error: str | None
    wall_s: float
    input_tokens: int
    output_tokens: int
    output_chunks: int
    output_tokens_per_s: float
    tokens_from: Literal["usage", "chunks"]
    ttft_ms: Percentiles
    itl_ms: Percentiles
    tpot_ms: Percentiles
    e2e_ms: Percentiles


class ServeBenchResult(Stamp, total=False):
    url: str
    model: str
    input_len: int
    output_len: int
    workload: dict[str, Any]
    tokens_from: Literal["usage", "chunks"]
    levels: list[ServeLevel]
    endpoint: dict[str, Any]
    serve_proof: dict[str, Any]


# evaluated at run time: no X | Y (Python 3.9)
BenchResult = Union[NetBenchResult, CollectiveBenchResult, TpBenchResult, ServeBenchResult]


# -- the validator ---------------------------------------------------------------------------
def stamp_hca(node: Mapping[str, Any]) -> str | None:
    """A result's node stamp's RDMA port as people read it, ``device:port``, from the typed
    ``device`` and ``port``; results written before those carry only the string ``hca``."""
    device, port = node.get("device"), node.get("port")
    if isinstance(device, str) and isinstance(port, int):
        return f"{device}:{port}"
    hca = node.get("hca")
    return hca if isinstance(hca, str) else None


def result_kind(data: object, where: object) -> Kind:
    """The kind of a loaded result; UsageError (one line, naming ``where``) when it is not a
    halo benchmark result of a schema and version this halo reads."""
    schema = data.get("schema") if isinstance(data, Mapping) else None
    if not isinstance(schema, str) or not schema.startswith("halo.bench."):
        raise UsageError(f"{where}: not a halo benchmark result (no halo.bench.* schema)")
    name, _, version = schema.removeprefix("halo.bench.").partition("/")
    kind = next((k for k in KINDS if k == name), None)
    if kind is None:
        raise UsageError(f"{where}: not a kind of result this halo knows ({schema[:60]!r})")
    if version != str(VERSIONS[kind]):
        raise UsageError(
            f"{where}: schema {schema[:60]!r} is not one this halo reads ({SCHEMAS[kind]})"
        )
    return kind


def require_kind(data: Mapping[str, Any], kind: Kind, where: object, hint: str = "") -> None:
    """UsageError unless ``data`` is a result of exactly ``kind`` (this halo's version)."""
    if data.get("schema") != SCHEMAS[kind]:
        raise UsageError(
            f"{where}: schema is {data.get('schema')!r}, expected {SCHEMAS[kind]!r}{hint}"
        )
