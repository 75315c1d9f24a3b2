"""The versioned benchmark results halo writes and reads (``halo.bench.<kind>/<version>``,
``halo.tune/1``, the result of ``halo tune``, and ``halo.run/1``, of ``halo run``):
their shapes as TypedDicts, their kinds as a Literal, and the one validator every reader
uses (``halo results``/``report`` through bench/results.py, ``halo plan --link`` and
``--calibrate``, the exporter's latency baseline).

A bottom-layer module: the capacity planner (``halo plan``) reads results but must not
import the bench package. Every result is the run's body plus the stamp (bench/results.py
``stamp``). A result cut short carries ``incomplete`` (the reason) and the rows measured
until then.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from typing import Any, Literal, TypedDict, Union, get_args, get_origin

from halo_cluster.errors import UsageError

Kind = Literal["net", "collective", "tp", "serve", "tune", "run"]
KINDS: tuple[Kind, ...] = get_args(Kind)
VERSIONS: dict[Kind, int] = {"net": 1, "collective": 1, "tp": 1, "serve": 1, "tune": 1, "run": 1}
RECIPES: tuple[Kind, ...] = ("tune", "run")  # results of a recipe, not of a benchmark
SCHEMAS: dict[Kind, str] = {
    kind: f"halo.{'' if kind in RECIPES else 'bench.'}{kind}/{VERSIONS[kind]}" for kind in KINDS
}


class NodeStamp(TypedDict, total=False):
    """What a run knew of one node (bench/cluster.py ``stamp``)."""

    hostname: str | None
    transport: str | None
    hca: str | None  # results written before device and port
    device: str | None
    port: int | None
    gid_index: int | None
    socket_ifname: str | None
    mtu: int | None
    fabric_address: str | None
    mgmt_address: str | None
    versions: dict[str, str | None]


class Stamp(TypedDict, total=False):
    """What every saved result carries besides its body."""

    schema: str
    kind: Kind
    created: str  # ISO 8601, UTC
    host: str
    versions: dict[str, str | None]
    plans: dict[str, Any]  # node -> TransportPlan.to_dict()
    nodes: dict[str, NodeStamp]  # node -> what the run knew of it
    incomplete: str  # why the run stopped early (absent when it did not)


# -- halo.bench.net/1 ------------------------------------------------------------------------
# A key a reader of saved results needs is in a TypedDict of total=True; one it can do
# without (or that results written by an earlier halo lack) is in its total=False subclass.
class _LatencyNeeded(TypedDict):
    p50: float
    tool: str


class Latency(_LatencyNeeded, total=False):
    p99: float | None
    avg: float | None
    samples: int | None


class _NetPathNeeded(TypedDict):
    node: str
    peer: str
    path: Literal["mgmt", "fabric", "link", "rdma"]


# "from" is a keyword: only the functional form can name it (it evaluates its types at
# import: no X | None there, for Python 3.9 on nodes)
_NetPathEnds = TypedDict("_NetPathEnds", {"from": str, "to": str}, total=False)


class NetPath(_NetPathNeeded, _NetPathEnds, total=False):
    transport: Literal["tcp", "rdma"]
    latency_us: Latency | None
    bandwidth_gbps: float | None
    bandwidth_tool: str
    retransmits: int | None
    line_rate_gbps: float | None
    pcie_ceiling_gbps: float | None
    pct_line_rate: float | None
    pct_pcie: float | None
    errors: list[str]
    hops: int  # a routed fabric: cables crossed (fabric between identities; link: 1)
    cable: str  # a routed fabric's link leg: "node1:thunderbolt0-node2:thunderbolt1"


class Skipped(TypedDict):
    pair: str
    path: str
    reason: str


class NetBenchResult(Stamp, total=False):
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


class _FitNeeded(TypedDict):
    alpha_us: float
    beta_gbps: float


class Fit(_FitNeeded, total=False):
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


class _TpRowNeeded(TypedDict):
    batch: int
    allreduces_per_token: int
    bytes_per_allreduce: int
    network_ms_per_token: float


class TpRow(_TpRowNeeded, total=False):
    network_ms_p90: float
    tokens_per_s_ceiling: float | None
    per_sequence_tokens_per_s_ceiling: float | None


class TpModel(TypedDict, total=False):
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


class NodeJoules(TypedDict, total=False):
    """One node's energy over a timed window (facts/energy.py ``NodeEnergy.to_dict``)."""

    node: str
    seconds: float
    joules: float | None
    watts: float | None
    method: Literal["energy counter", "power samples"] | None
    sources: list[str]
    problem: str | None  # why no number: "no power source", a node that did not answer


class _WindowEnergyNeeded(TypedDict):
    coverage: str  # "2 of 3 nodes measured"
    nodes: list[NodeJoules]


class WindowEnergy(_WindowEnergyNeeded, total=False):
    """Every node's energy over one timed window (bench/energy.py ``LevelEnergy``): null
    joules where no node has a source, never a made-up number."""

    tokens: int  # output tokens of the window
    joules: float | None
    joules_per_token: float | None
    watts: dict[str, list[list[float]]]  # node -> [seconds from the start, watts]


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
    energy: WindowEnergy | None  # null: not measured (no nodes known)


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


# -- halo.tune/1 -----------------------------------------------------------------------------
class TuneLayout(TypedDict):
    name: str
    engine: str
    nodes: int
    tp: int
    pp: int


class TuneLevel(TypedDict, total=False):
    tokens_per_s: float | None
    tpot_ms_p50: float | None
    ttft_ms_p50: float | None
    errors: int
    energy: WindowEnergy | None


class TuneRow(TypedDict, total=False):
    layout: TuneLayout
    predicted_tokens_per_s: dict[str, float] | None  # concurrency ("1") -> tokens/s
    measured: dict[str, TuneLevel] | None
    proven: str | None
    tokens: dict[str, Any] | None
    error: str | None
    engine_error: str | None
    ready_s: float | None
    seconds: float


class TuneWinner(TypedDict):
    layout: str | None
    reason: str


class TuneResult(Stamp, total=False):
    cluster: str
    model: str
    objective: Literal["latency", "throughput"]
    concurrency: list[int]
    workload: dict[str, Any]
    planner: dict[str, Any]
    rows: list[TuneRow]
    winner: TuneWinner


# -- halo.run/1 ------------------------------------------------------------------------------
class RunResult(Stamp, total=False):
    cluster: str
    model: str
    layout: str
    reason: str
    url: str | None
    already_running: bool
    predicted_tokens_per_s: float | None  # concurrency 1
    measured_tokens_per_s: float | None
    proven: str | None
    problems: list[str]
    stopped: bool
    energy: WindowEnergy | None  # the short bench at concurrency 1


# evaluated at run time: no X | Y (Python 3.9)
BenchResult = Union[
    NetBenchResult, CollectiveBenchResult, TpBenchResult, ServeBenchResult, TuneResult, RunResult
]
TYPES: dict[Kind, type] = {
    "net": NetBenchResult,
    "collective": CollectiveBenchResult,
    "tp": TpBenchResult,
    "serve": ServeBenchResult,
    "tune": TuneResult,
    "run": RunResult,
}


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
    recipe = next((k for k in RECIPES if schema == SCHEMAS[k]), None)
    if recipe is not None:
        return recipe
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


def check_result(data: object, where: object) -> Kind:
    """``result_kind``, then every field of ``data`` this halo's types describe has its type
    (a key a reader needs is there): UsageError, one line naming ``where`` and the field,
    for anything else. Keys the types do not name are left alone. Controller side only: it
    evaluates the types' annotations (Python 3.10+)."""
    kind = result_kind(data, where)
    assert isinstance(data, Mapping)
    declared = data.get("kind", kind)
    if declared != kind:
        raise UsageError(f"{where}: kind is {_shown(declared)} in a {data['schema']} result")
    problem = _mismatch(data, TYPES[kind], "")
    if problem is not None:
        raise UsageError(f"{where}: not a complete {data['schema']} result: {problem}")
    return kind


_UNIONS = (Union, getattr(types, "UnionType", Union))  # Optional[X], and X | None (3.10+)


def _mismatch(value: Any, hint: Any, at: str) -> str | None:
    """Why ``value`` is not of the type ``hint`` (None when it is); ``at`` is where it sits."""
    if hint is Any:
        return None
    origin = get_origin(hint)
    if origin in _UNIONS:
        arms = get_args(hint)
        if value is None and type(None) in arms:
            return None
        given = [arm for arm in arms if arm is not type(None)]
        if len(given) == 1:  # X or null, and not null: what is wrong inside it
            return _mismatch(value, given[0], at)
        if any(_mismatch(value, arm, at) is None for arm in given):
            return None
        return _wrong(value, " or ".join(_name(arm) for arm in arms), at)
    if origin is Literal:
        choices = get_args(hint)
        return None if value in choices else _wrong(value, " or ".join(map(repr, choices)), at)
    if origin is list:
        if not isinstance(value, list):
            return _wrong(value, "a list", at)
        (item,) = get_args(hint)
        found = (_mismatch(v, item, f"{at}[{i}]") for i, v in enumerate(value))
        return next((p for p in found if p is not None), None)
    if origin is dict:
        if not isinstance(value, dict):
            return _wrong(value, "an object", at)
        item = get_args(hint)[1]
        found = (_mismatch(v, item, _key(at, k)) for k, v in value.items())
        return next((p for p in found if p is not None), None)
    if isinstance(hint, type) and issubclass(hint, dict):  # a TypedDict
        return _record(value, hint, at)
    return None if _is(value, hint) else _wrong(value, _name(hint), at)


def _record(value: Any, hint: type, at: str) -> str | None:
    from typing import get_type_hints

    if not isinstance(value, dict):
        return _wrong(value, "an object", at)
    for key in sorted(getattr(hint, "__required_keys__", ())):
        if key not in value:
            return f"{_key(at, key)} is missing"
    for key, field in get_type_hints(hint).items():
        if key in value:
            problem = _mismatch(value[key], field, _key(at, key))
            if problem is not None:
                return problem
    return None


def _is(value: Any, hint: Any) -> bool:
    if hint is type(None):
        return value is None
    if isinstance(value, bool) or hint is bool:
        return isinstance(value, bool) and hint is bool
    if hint is float:  # JSON writes 2.0 as 2 as often as not; finite (bounded/jsonin.py)
        if isinstance(value, int):
            return value.bit_length() <= 64
        return isinstance(value, float) and math.isfinite(value)
    if hint is int:
        return isinstance(value, int) and value.bit_length() <= 64
    return isinstance(value, hint)


_NAMES = {str: "a string", int: "a whole number", float: "a number", bool: "true or false"}


def _name(hint: Any) -> str:
    if hint is type(None):
        return "null"
    if get_origin(hint) is list:
        return "a list"
    if get_origin(hint) is dict or (isinstance(hint, type) and issubclass(hint, dict)):
        return "an object"
    if get_origin(hint) is Literal:
        return " or ".join(map(repr, get_args(hint)))
    return _NAMES.get(hint, str(hint))


def _key(at: str, key: object) -> str:
    named = key if isinstance(key, str) and key.isidentifier() and key.isascii() else None
    return f"{at}.{named}" if named and at else named or f"{at}[{_shown(key)}]"


def _shown(value: Any) -> str:
    """``value`` for a one-line message: a container by its kind, a scalar escaped, cut short."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, int) and value.bit_length() > 64:
        return "a number of more than 64 bits"
    text = ascii(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _wrong(value: Any, expected: str, at: str) -> str:
    return f"{at or 'the result'} is {_shown(value)}, not {expected}"
