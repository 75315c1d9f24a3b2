"""``halo run``: from a model to a measured endpoint in one command.

1. the layout: given (``--layout``), else the winner of the latest ``halo tune`` of this
   model, else the planner's fastest predicted layout at concurrency 1 that fits; the
   reason in one line;
2. idempotent: when that layout of that model is already served and healthy, only that is
   checked and the endpoint printed (nothing is copied, started or measured);
3. the model copied to every node's store (only what a node lacks travels); it is located
   once, and every node's facts are gathered once, however many starts the run makes;
4. the token reference: when the engine has none for this model and the layout spans
   several nodes, its one-node layout is served first to record it;
5. served (supervised unless [serve.supervise] says otherwise), proven by every witness
   (the doctor's gate, the engine's words, the counters, the tokens), then a short bench
   serve at concurrency 1 beside the prediction;
6. a result file (``halo.run/1``, ``halo results``, ``halo report``): the layout and why,
   predicted beside measured, what the witnesses said.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halo_cluster.cluster.handle import Cluster
from halo_cluster.cluster.state import read_state
from halo_cluster.engines.layout import Layout
from halo_cluster.engines.protocol import find_engine, format_hint
from halo_cluster.errors import HaloError, UsageError
from halo_cluster.jsonout import JsonObject
from halo_cluster.recipes.layouts import candidates, one_node, parse_layout
from halo_cluster.recipes.predict import ModelFiles, predict
from halo_cluster.recipes.tune import Workload, copy_model, locate_model, short_bench
from halo_cluster.serving.bringup import Serving, layout_label
from halo_cluster.serving.reference import find_reference

if TYPE_CHECKING:
    from halo_cluster.bench.energy import LevelEnergy

RUN_WORKLOAD = Workload(levels=(1,), prompts=4, input_len=64, output_len=32)


@dataclass
class RunResult:
    model: str
    layout: str
    reason: str
    url: str | None = None
    api_key_env: str | None = None
    already_running: bool = False
    predicted_tokens_per_s: float | None = None
    measured_tokens_per_s: float | None = None
    serve: dict[str, Any] = field(default_factory=dict)
    stopped: bool = False
    commands: list[str] = field(default_factory=list)
    energy: LevelEnergy | None = None  # the short bench's, at concurrency 1

    @property
    def energy_line(self) -> str:
        """The energy of the measured bench for people (never a made-up number)."""
        if self.energy is None:
            return "energy: not measured (no bench ran)"
        return self.energy.line()

    def to_json(self) -> JsonObject:
        """What ``halo run --json`` prints (with ``saved`` added)."""
        return {**self.__dict__, "energy": None if self.energy is None else self.energy.to_dict()}

    def to_result(self, cluster: str) -> JsonObject:
        """The body of its result file (``halo.run/1``; the stamp is added when saved)."""
        from halo_cluster.schema import SCHEMAS

        return {
            "schema": SCHEMAS["run"],
            "kind": "run",
            "cluster": cluster,
            "model": self.model,
            "layout": self.layout,
            "reason": self.reason,
            "url": self.url,
            "already_running": self.already_running,
            "predicted_tokens_per_s": self.predicted_tokens_per_s,
            "measured_tokens_per_s": self.measured_tokens_per_s,
            "proven": self.serve.get("proven"),
            "problems": list(self.serve.get("problems") or []),
            "stopped": self.stopped,
            "energy": None if self.energy is None else self.energy.to_dict(),
        }


def latest_tune(results: Path, model: str, cluster: str) -> tuple[str, str] | None:
    """The winner of the latest complete ``halo tune`` of ``model`` on ``cluster``, and its
    file. A file that is not such a result (not a regular file, too large, not JSON, nested
    too deep, of another shape) is passed over, as every reader of results does (bounded/)."""
    from halo_cluster.bench.results import MAX_RESULT_BYTES
    from halo_cluster.bounded.jsonin import load_file

    try:
        found = sorted(results.glob("tune-*.json")) if results.is_dir() else []
    except OSError:
        return None
    for path in reversed(found):
        try:
            doc = load_file(path, MAX_RESULT_BYTES, "a halo result")
        except HaloError:
            continue
        winner = _tuned_layout(doc, model, cluster)
        if winner is not None:
            return winner, path.name
    return None


def _tuned_layout(doc: Any, model: str, cluster: str) -> str | None:
    """The winner's layout (a non-empty string) of ``doc`` when it is a complete tune result
    of ``model`` on ``cluster``."""
    if not isinstance(doc, dict) or (doc.get("model"), doc.get("cluster")) != (model, cluster):
        return None
    winner = doc.get("winner")
    layout = winner.get("layout") if isinstance(winner, dict) else None
    complete = doc.get("incomplete") in (None, False)
    return layout if isinstance(layout, str) and layout and complete else None


def choose(
    cluster: Cluster, files: ModelFiles, asked: str | None, engine: str | None, results: Path
) -> tuple[Layout, str, float | None]:
    """The layout, why, and its predicted tokens/s at concurrency 1 (None: no prediction)."""
    nodes = len(cluster.config.nodes)
    engines = tuple(e for e in files.engines if engine in (None, e))
    if not engines:
        raise UsageError(
            f"the model has no files for {engine} ({format_hint([find_engine(str(engine))])})"
        )
    every = candidates(nodes, engines)
    predictions = predict(cluster.config, files, every, [1], results)

    def rate(layout: Layout) -> float | None:
        return (predictions.by_layout.get(layout.name) or {}).get("1")

    if asked:
        chosen = parse_layout(asked, nodes)
        return chosen, "the layout asked for (--layout)", rate(chosen)
    tuned = latest_tune(results, files.name, cluster.config.name)
    if tuned is not None:
        chosen = parse_layout(tuned[0], nodes)
        if chosen.engine in engines:
            return chosen, f"the winner of halo tune ({tuned[1]})", rate(chosen)
    fitting = [x for x in every if rate(x) is not None and predictions.fits.get(x.name, True)]
    if not fitting:
        chosen = every[0]
        why = "; ".join(predictions.notes) or "no layout is predicted to fit"
        return chosen, f"{chosen.name}, one node (no prediction: {why})", None
    chosen = max(fitting, key=lambda x: rate(x) or 0.0)
    return (
        chosen,
        (
            f"the planner's fastest at concurrency 1: {rate(chosen):g} tok/s predicted "
            f"({cluster.config.hardware}, link {predictions.link})"
        ),
        rate(chosen),
    )


def served_name(cluster: Cluster, layout: Layout) -> str:
    """How the bring-up names this layout once served ("vllm tp2 on node1+node2")."""
    args = layout.serve_args()  # an engine without tensor parallelism is given no tp
    nodes = [n.name for n in cluster.config.nodes[: layout.nodes]]
    return layout_label(layout.engine, args.get("tp"), args.get("pp", 1), nodes)


def running(cluster: Cluster, files: ModelFiles, layout: Layout) -> dict[str, Any] | None:
    """The server already up for this model and layout, healthy (else None)."""
    from halo_cluster.serving.status import serve_health

    state = read_state(cluster.config)
    served = state.serve if state else None
    if served is None or served.layout is None or served.engine != layout.engine:
        return None
    if served.model != files.served_path(layout.engine, cluster.config.models.dir):
        return None
    if served.layout != served_name(cluster, layout):
        return None
    health = serve_health(cluster, state, [])
    return health if health and health.get("healthy") else None


def run(
    cluster: Cluster,
    source: str,
    asked: str | None,
    engine: str | None,
    results: Path,
    progress: Callable[[str], None],
    wait_s: float = 900.0,
) -> RunResult:
    from halo_cluster.engines.request import serve_request

    located = locate_model(cluster, source, progress)
    files = located.files
    layout, reason, predicted = choose(cluster, files, asked, engine, results)
    progress(f"layout: {layout.name} ({reason})")
    config = cluster.config
    out = RunResult(files.name, layout.name, reason, api_key_env=config.serve.api_key_env)
    out.predicted_tokens_per_s = predicted
    out.commands = [
        f"halo status --config {config.path}",
        f"halo logs --config {config.path}",
        f"halo stop --config {config.path}",
    ]
    found = running(cluster, files, layout)
    if found is not None:
        out.already_running, out.url = True, found["endpoint"]
        return out
    copy_model(cluster, located, progress)
    model = files.served[layout.engine]
    serving = Serving(cluster)
    opened = files.served_path(layout.engine, config.models.dir)
    known = find_reference(config, layout.engine, opened)
    one = one_node(layout.engine)
    if known is None and layout.nodes > 1 and one is not None:
        progress(f"recording the one-node token reference first ({layout.engine} on one node)")
        first = serving.start(
            serve_request(
                config, model=model, supervise=False, reference="record", wait_s=wait_s,
                **one.serve_args(),
            )
        )  # fmt: skip
        serving.stop()  # the layout's start then stops nothing: this was the only server
        if first.stopped:
            said = "; ".join(first.problems)
            raise HaloError(f"the one-node reference did not come up: {said}")
    # a one-node layout with no reference yet is the reference
    mode = "record" if known is None and layout.nodes == 1 else "full"
    request = serve_request(
        config, model=model, reference=mode, wait_s=wait_s, **layout.serve_args()
    )
    result = serving.start(request)
    out.serve = {k: v for k, v in result.to_dict().items() if k != "verdict"}
    out.url, out.stopped = result.url, result.stopped
    if result.stopped:
        return out
    measured = short_bench(cluster, RUN_WORKLOAD, progress)
    out.measured_tokens_per_s = measured["1"].tokens_per_s
    out.energy = measured["1"].energy
    return out
