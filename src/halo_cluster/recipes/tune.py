"""``halo tune``: every candidate layout run for real, measured, and set beside the
planner's prediction; the winner by the stated objective (``halo.tune/1``).

For each layout in turn: ``halo serve`` (no supervisor; the token witness always, on every
prompt: each engine's one-node layout runs first and records the reference the others are
compared with), a short ``bench serve`` at each concurrency level, then stop. A layout
that does not come up, or whose witnesses refuse it, is a row with its cause (the engine's
own words where it refused the layout). Ctrl-C stops the running layout and keeps the rows
measured so far (``incomplete``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halo_cluster.cluster.handle import Cluster
from halo_cluster.config import secret
from halo_cluster.engines.layout import Layout
from halo_cluster.engines.protocol import every_engine
from halo_cluster.errors import HaloError
from halo_cluster.jsonout import JsonObject
from halo_cluster.recipes.layouts import one_node
from halo_cluster.recipes.predict import ModelFiles, Predictions
from halo_cluster.schema import SCHEMAS
from halo_cluster.serving.bringup import Serving
from halo_cluster.serving.result import ServeResult

if TYPE_CHECKING:
    from halo_cluster.bench.energy import LevelEnergy
    from halo_cluster.bench.serve_load import Level

SCHEMA = SCHEMAS["tune"]  # halo.tune/1
OBJECTIVES = ("latency", "throughput")


@dataclass(frozen=True)
class Workload:
    """The short bench serve run on each layout."""

    levels: tuple[int, ...] = (1, 4)
    prompts: int = 8
    input_len: int = 64
    output_len: int = 32
    wait_s: float = 900.0


@dataclass(frozen=True)
class LevelRate:
    """A layout's short bench at one concurrency: its rate, medians, errors and the
    cluster's energy over its timed window (None: not measured)."""

    tokens_per_s: float | None
    tpot_ms_p50: float | None
    ttft_ms_p50: float | None
    errors: int
    energy: LevelEnergy | None = None

    @classmethod
    def of(cls, level: Level) -> LevelRate:
        return cls(
            level.output_tokens_per_s, level.tpot_ms.p50, level.ttft_ms.p50, level.errors,
            level.energy,
        )  # fmt: skip

    @property
    def joules_per_token(self) -> float | None:
        return None if self.energy is None else self.energy.joules_per_token

    def to_dict(self) -> JsonObject:
        return {
            "tokens_per_s": self.tokens_per_s,
            "tpot_ms_p50": self.tpot_ms_p50,
            "ttft_ms_p50": self.ttft_ms_p50,
            "errors": self.errors,
            "energy": None if self.energy is None else self.energy.to_dict(),
        }


TOKEN_KEYS = ("ok", "agreement", "drift_nats", "recorded")  # what a row keeps of the witness


@dataclass(frozen=True)
class TuneRow:
    """One layout run for real (a row of ``halo.tune/1``): predicted beside measured, what
    the witnesses said, or why it did not come up. ``ready_s`` is written once the start
    returned (``came_up``), ``engine_error`` once a failed layout's engine was launched
    (``launched``): a row of a layout refused before either has neither key."""

    layout: Layout
    predicted_tokens_per_s: dict[str, float] | None = None  # concurrency ("1") -> tokens/s
    measured: dict[str, LevelRate] | None = None  # concurrency ("1") -> its short bench
    proven: str | None = None
    tokens: JsonObject | None = None  # the token witness's words (TOKEN_KEYS), as served
    error: str | None = None
    came_up: bool = False
    ready_s: float | None = None
    launched: bool = False
    engine_error: str | None = None
    seconds: float = 0.0

    def rate(self, level: str) -> LevelRate | None:
        return (self.measured or {}).get(level)

    @property
    def same_tokens(self) -> bool:
        """Not refused by the token witness (a row it never compared counts as same)."""
        return (self.tokens or {}).get("ok", True) is not False

    def to_dict(self) -> JsonObject:
        measured = self.measured
        out: JsonObject = {
            "layout": self.layout.to_dict(),
            "predicted_tokens_per_s": self.predicted_tokens_per_s,
            "measured": None if measured is None else {c: m.to_dict() for c, m in measured.items()},
            "proven": self.proven,
            "tokens": self.tokens,
            "error": self.error,
        }
        if self.came_up:
            out["ready_s"] = self.ready_s
        if self.launched:
            out["engine_error"] = self.engine_error
        out["seconds"] = self.seconds
        return out


def ordered(layouts: list[Layout]) -> list[Layout]:
    """Each engine's one-node layout first (it records the reference), then the rest in the
    order given; an engine's one-node layout is added when the list lacks it."""
    out: list[Layout] = []
    for engine in dict.fromkeys(layout.engine for layout in layouts):
        single = one_node(engine)
        if single is not None:
            out.append(next((x for x in layouts if x == single), single))
    return out + [x for x in layouts if x not in out]


class Tuner:
    def __init__(
        self,
        cluster: Cluster,
        files: ModelFiles,
        predictions: Predictions,
        workload: Workload,
        progress: Callable[[str], None],
    ) -> None:
        self.cluster = cluster
        self.files = files
        self.predictions = predictions
        self.workload = workload
        self.progress = progress
        self.serving = Serving(cluster)

    def run(self, layouts: list[Layout], rows: list[TuneRow]) -> None:
        """Measure every layout, appending each row to ``rows`` as it is done (so the
        caller keeps them when Ctrl-C ends the run); every server is stopped at the end."""
        try:
            for index, layout in enumerate(layouts, 1):
                self.progress(f"[{index}/{len(layouts)}] {layout.name}")
                rows.append(self.measure(layout))
        finally:
            self.serving.stop()

    def measure(self, layout: Layout) -> TuneRow:
        from halo_cluster.engines.request import serve_request

        started = time.monotonic()
        row = TuneRow(layout, self.predictions.by_layout.get(layout.name))
        try:
            request = serve_request(
                self.cluster.config,
                model=self.files.served[layout.engine],
                supervise=False,
                reference="record" if layout.nodes == 1 else "full",
                wait_s=self.workload.wait_s,
                **layout.serve_args(),
            )
            result = self.serving.start(request)
            row = witnessed(row, result)
            if not result.stopped:
                row = replace(row, measured=self._bench())
        except HaloError as err:
            said = str(err).splitlines()[0][:400] if str(err) else type(err).__name__
            row = replace(row, error=said)
            if self.serving.launched:  # else the logs are an earlier layout's
                row = replace(row, launched=True, engine_error=self._engine_error(layout))
        finally:
            self.serving.stop()
        return replace(row, seconds=round(time.monotonic() - started, 1))

    def _engine_error(self, layout: Layout) -> str | None:
        """What the engine itself raised on the layout's nodes, where it did (its logs stay
        after a stop): "node2: AssertionError: …"."""
        from halo_cluster.engines import process
        from halo_cluster.witness.engine_log import raised

        said = []
        for node in self.cluster.config.nodes[: layout.nodes]:
            client = self.cluster.client(node)
            try:
                found = raised(process.log_text(client, self.cluster.config.name).splitlines())
            except HaloError:
                continue
            if found:
                said.append(f"{node.name}: {found}")
        return "; ".join(said)[:600] or None

    def _bench(self) -> dict[str, LevelRate]:
        return short_bench(self.cluster, self.workload, self.progress)


def witnessed(row: TuneRow, result: ServeResult) -> TuneRow:
    """The row once its start returned: what the witnesses proved, and when it was ready."""
    tokens = result.tokens
    return replace(
        row,
        proven=result.proven,
        tokens={k: tokens.get(k) for k in TOKEN_KEYS if k in tokens},
        came_up=True,
        ready_s=result.ready_s,
        error="; ".join(result.problems)[:600] if result.stopped else row.error,
    )


def short_bench(
    cluster: Cluster, work: Workload, progress: Callable[[str], None]
) -> dict[str, LevelRate]:
    """bench serve's load on the served endpoint: per level ("1"), tokens/s, medians and
    every node's energy over the level's timed window."""
    from halo_cluster.bench.endpoint import reach
    from halo_cluster.bench.energy import Meter, node_reader
    from halo_cluster.bench.serve_load import measure

    config = cluster.config
    meter = Meter([node.name for node in config.nodes], node_reader(cluster.clients))
    with reach(config, progress) as endpoint:
        result = measure(
            endpoint.url,
            None,
            list(work.levels),
            work.prompts,
            work.input_len,
            work.output_len,
            secret(config.serve.api_key_env),
            progress,
            seed=0,
            warmup=1,
            meter=meter,
        )
    return {str(level.concurrency): LevelRate.of(level) for level in result.levels}


def winner(
    rows: list[TuneRow], objective: str, levels: tuple[int, ...]
) -> tuple[TuneRow | None, str]:
    """The best measured row and why: ``latency``, the most tokens/s of one request alone
    (the lowest concurrency); ``throughput``, the most tokens/s at the highest. Only rows
    that came up, proved their tokens and measured without errors compete."""
    level = str(min(levels) if objective == "latency" else max(levels))
    scored: list[tuple[float, TuneRow]] = []
    for row in rows:
        found = row.rate(level)
        ok = row.error is None and row.same_tokens
        if ok and found and found.errors == 0 and found.tokens_per_s:
            scored.append((found.tokens_per_s, row))
    if not scored:
        return None, "no layout came up and measured cleanly"
    best_rate, best = max(scored, key=lambda s: s[0])
    rest = sorted((s for s in scored if s[1] is not best), key=lambda s: -s[0])
    runner = f"; next {rest[0][1].layout.name} at {rest[0][0]:g}" if rest else ""
    name = best.layout.name
    return best, (f"{name}: {best_rate:g} tok/s at concurrency {level} ({objective}){runner}")


@dataclass(frozen=True)
class Tuned:
    """A whole ``halo tune`` (the body of ``halo.tune/1``; the stamp is added when saved):
    every row measured, and the winner by the objective with the reason."""

    cluster: str  # halo run takes a winner of its own cluster only
    model: str
    objective: str
    workload: Workload
    predictions: Predictions
    rows: tuple[TuneRow, ...]
    incomplete: bool
    best: TuneRow | None
    reason: str

    def winner(self) -> dict[str, str | None]:
        return {"layout": self.best.layout.name if self.best else None, "reason": self.reason}

    def to_dict(self) -> JsonObject:
        workload = self.workload
        return {
            "schema": SCHEMA,
            "kind": "tune",
            "cluster": self.cluster,
            "model": self.model,
            "objective": self.objective,
            "concurrency": list(workload.levels),
            "workload": {
                "prompts": workload.prompts,
                "input_len": workload.input_len,
                "output_len": workload.output_len,
            },
            "planner": self.predictions.to_dict(),
            "rows": [row.to_dict() for row in self.rows],
            "winner": self.winner(),
            # as every result cut short: the reason, and the rows measured until then
            **(
                {"incomplete": f"interrupted after {len(self.rows)} layout(s)"}
                if self.incomplete
                else {}
            ),
        }


def document(
    cluster: str,
    model: str,
    objective: str,
    workload: Workload,
    predictions: Predictions,
    rows: list[TuneRow],
    incomplete: bool,
) -> Tuned:
    best, reason = winner(rows, objective, workload.levels)
    return Tuned(
        cluster, model, objective, workload, predictions, tuple(rows), incomplete, best, reason
    )


@dataclass(frozen=True)
class LocatedModel:
    """A model found once (its files here, its store name), and what copies it to every
    node's store: the source it was resolved to, hashed when the copy first needs it."""

    files: ModelFiles
    path: Path | None  # None: a name of the stores, nothing to copy
    found: Any = None  # models.source.Source, when resolved (a Hugging Face id is at once)


def model_files(
    cluster: Cluster, source: str, progress: Callable[[str], None], sync: bool = True
) -> ModelFiles:
    """The model, located and (``sync``) copied to every node that lacks it."""
    located = locate_model(cluster, source, progress)
    if sync:
        copy_model(cluster, located, progress)
    return located.files


def copy_model(cluster: Cluster, located: LocatedModel, progress: Callable[[str], None]) -> None:
    """``halo model sync`` of a located model to every node's store (only what a node
    lacks travels); a name of the stores is already there."""
    from halo_cluster.models.source import resolve_source
    from halo_cluster.models.sync import Sync

    if located.path is None:
        return
    name = located.files.name
    progress(f"syncing {located.path} to every node's store as {name}")
    found = located.found or resolve_source(cluster, str(located.path), name)
    result = Sync(cluster, found, [n.name for n in cluster.config.nodes]).run()
    if not result.ok:
        failed = [n for n, s in result.nodes.items() if s.status == "failed"]
        raise HaloError(f"the model could not be copied to {', '.join(failed)}: halo model sync")


def locate_model(cluster: Cluster, source: str, progress: Callable[[str], None]) -> LocatedModel:
    """Where the model is, found once: a directory here (config.json beside the weights, a
    GGUF file in it too where llama.cpp should run) or one GGUF file, to be copied to every
    node's store (``copy_model``); an engine serving a directory is then given its store
    name, one serving a GGUF the file in the store. A Hugging Face repo id (org/name) is
    taken from the local Hugging Face cache (downloaded where the hub answers), then copied
    the same way; a name of the stores (``halo model``) is served as it is, once every node
    holds it complete and the same."""
    from halo_cluster.errors import UsageError
    from halo_cluster.models.source import REPO_ID, resolve_source
    from halo_cluster.models.stores import is_store_name
    from halo_cluster.modelstore.manifest import check_name

    path = Path(source).expanduser()
    found = None
    if not path.exists() and is_store_name(source):
        return LocatedModel(stored_files(cluster, source), None)
    if not path.exists() and REPO_ID.match(source.split("@", 1)[0]):
        progress(f"{source}: from the Hugging Face cache (downloaded where the hub answers)")
        found = resolve_source(cluster, source, None)
        path, name = Path(found.path), found.manifest.name
    elif not path.exists():
        raise UsageError(
            f"{source}: no such file or directory here, no model of that name in the stores, "
            "and not a Hugging Face repo id (give the model's path, a name from 'halo model "
            "ls', or org/name)"
        )
    else:
        name = _store_name(path)
    check_name(name)
    hf_dir = path if (path / "config.json").is_file() else None
    ggufs = sorted(path.glob("*.gguf")) if path.is_dir() else [path] * (path.suffix == ".gguf")
    if hf_dir is None and not ggufs:
        raise UsageError(f"{source}: neither a model directory (config.json) nor a GGUF file")
    store = cluster.config.models.dir.rstrip("/")
    given = {  # what each format's engines are given: the store's name, or the GGUF's path
        "hf": name if hf_dir is not None else None,
        "gguf": f"{store}/{name}/{ggufs[0].name}" if ggufs else None,  # a file keeps its name
    }
    served = {e.name: str(given[e.model_format]) for e in every_engine() if given[e.model_format]}
    return LocatedModel(ModelFiles(name, hf_dir, ggufs[0] if ggufs else None, served), path, found)


def stored_files(cluster: Cluster, name: str) -> ModelFiles:
    """A model already in every node's store: vLLM serves a directory by its name, llama.cpp
    a GGUF entry; the planner has no file here to read (its predictions say so)."""
    from halo_cluster.errors import UsageError
    from halo_cluster.models.stores import resolve

    found = resolve(cluster, name, [n.name for n in cluster.config.nodes])
    if found is None:
        raise UsageError(f"{name}: no model of that name in the stores ('halo model ls')")
    form = "gguf" if found.path.endswith(".gguf") else "hf"
    engines = [e.name for e in every_engine() if e.model_format == form]
    return ModelFiles(
        name, served=dict.fromkeys(engines, name), opened=dict.fromkeys(engines, found.path)
    )


def _store_name(path: Path) -> str:
    base = path.resolve().name
    return base.removesuffix(".gguf") if path.is_file() else base
