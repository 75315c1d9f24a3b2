"""``halo tune`` (every layout run for real beside the planner's prediction) and ``halo run``
(from a model to a measured endpoint)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from halo_cluster import engine_registry
from halo_cluster.cli.options import config_option
from halo_cluster.jsonout import JsonObject, emit_json

if TYPE_CHECKING:
    from halo_cluster.recipes.tune import Tuned


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r}: use a list like 1,4") from None
    if not levels or min(levels) < 1 or max(levels) > 256:
        raise click.BadParameter("concurrency levels are 1 to 256")
    return tuple(sorted(set(levels)))


def _say(quiet: bool):  # type: ignore[no-untyped-def]
    return (lambda _m: None) if quiet else (lambda m: click.echo(f"  {m}", err=True))


@click.command()
@click.argument("model")
@config_option()
@click.option(
    "--layouts",
    default="auto",
    show_default=True,
    help="auto: every layout this cluster can run for each engine the model's files allow; "
    "or a list, e.g. 'vllm TP2,vllm PP2,llama.cpp RPC2'.",
)
@click.option(
    "--engine",
    "engines",
    multiple=True,
    type=click.Choice(engine_registry.names()),
    help="With --layouts auto: only this engine's layouts (repeatable).",
)
@click.option("--concurrency", default="1,4", show_default=True, help="Concurrency levels.")
@click.option(
    "--objective",
    type=click.Choice(["latency", "throughput"]),
    default="latency",
    show_default=True,
    help="latency: the most tokens/s of one request alone; throughput: the most tokens/s "
    "at the highest concurrency.",
)
@click.option("--prompts", default=8, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--output-len", default=32, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--out", metavar="FILE", help="Write the result here (default: the results dir).")
@click.option("--json", "as_json", is_flag=True, help="Print the halo.tune/1 result as JSON.")
def tune(
    model: str,
    config_path: str | None,
    layouts: str,
    engines: tuple[str, ...],
    concurrency: str,
    objective: str,
    prompts: int,
    output_len: int,
    out: str | None,
    as_json: bool,
) -> int:
    """Run every candidate layout of MODEL for real — vLLM TP, PP and TP×PP across the
    nodes, llama.cpp on one node and over RPC across 2…N — each served, proven by its
    witnesses (the tokens against the engine's one-node reference, recorded first), and
    measured by a short bench serve at each concurrency, with the planner's prediction
    beside each measurement; then the winner by --objective. MODEL is a model directory
    (config.json; a GGUF file in it too for llama.cpp) or a GGUF file here, copied to every
    node's store first (a Hugging Face repo id: from the local cache, downloaded where the
    hub answers), or a name 'halo model ls' shows, served as it is. A layout that
    fails is a row with its cause. Ctrl-C stops the running layout and keeps the rows
    measured so far. The result (halo.tune/1) is saved in the results directory."""
    from halo_cluster.cli.cluster import cluster_handle
    from halo_cluster.recipes import tune as tuning
    from halo_cluster.recipes.predict import predict

    levels = _levels(concurrency)
    say = _say(as_json)
    cluster = cluster_handle(config_path, as_json)
    files = tuning.model_files(cluster, model, say)
    chosen = _layouts(layouts, engines, files, len(cluster.config.nodes))
    workload = tuning.Workload(levels, prompts, output_len=output_len)
    from halo_cluster.config import results_dir

    predictions = predict(cluster.config, files, chosen, list(levels), results_dir())
    for note in predictions.notes:
        say(note)
    rows: list[tuning.TuneRow] = []
    incomplete = False
    try:
        tuning.Tuner(cluster, files, predictions, workload, say).run(chosen, rows)
    except KeyboardInterrupt:
        incomplete = True
        say(f"interrupted: keeping the {len(rows)} layout(s) measured so far")
    doc = tuning.document(
        cluster.config.name, files.name, objective, workload, predictions, rows, incomplete
    )
    body = doc.to_dict()
    saved = _save(cluster, body, out)
    if as_json:
        emit_json({**body, "saved": str(saved)})
    else:
        _render(doc)
        click.echo(f"saved {saved}")
    if incomplete:
        sys.exit(130)
    return 0 if doc.best else 1


def _layouts(text: str, engines: tuple[str, ...], files: Any, nodes: int) -> list[Any]:
    from halo_cluster.engines.protocol import find_engine, format_hint
    from halo_cluster.errors import UsageError
    from halo_cluster.recipes.layouts import candidates, parse_layout
    from halo_cluster.recipes.tune import ordered

    if text.strip() != "auto":
        found = [parse_layout(part, nodes) for part in text.split(",") if part.strip()]
        missing = [x.name for x in found if x.engine not in files.served]
        if missing:
            hint = format_hint([find_engine(x.engine) for x in found if x.name in missing])
            raise UsageError(
                f"{', '.join(missing)}: the model has no files for that engine ({hint})"
            )
        return ordered(found)
    allowed = tuple(e for e in files.engines if not engines or e in engines)
    if not allowed:
        raise UsageError(f"the model has no files for {', '.join(engines)}")
    return ordered(candidates(nodes, allowed, _heads(files)))


def _heads(files: Any) -> int | None:
    """The model's attention heads, read as the planner reads config.json (None: unknown)."""
    from halo_cluster.capacity.hf_config import model_from_hf_config
    from halo_cluster.errors import HaloError

    if files.hf_dir is None:
        return None
    try:
        return model_from_hf_config(files.hf_dir / "config.json").heads
    except (HaloError, OSError, ValueError):
        return None


def _save(cluster: Any, doc: JsonObject, out: str | None, kind: str = "tune") -> Any:
    from halo_cluster.bench import results
    from halo_cluster.cluster.state import read_state
    from halo_cluster.config import results_dir
    from halo_cluster.errors import HaloError

    state = read_state(cluster.config)
    plans = {n: p.to_dict() for n, p in state.plans().items()} if state else None
    stamped = results.stamp(doc, plans)
    doc.update({k: stamped[k] for k in ("created", "host", "versions", "plans")})
    try:
        return results.save(doc, out, results_dir(), kind)
    except OSError as err:
        raise HaloError(f"cannot save the result: {err.strerror or err}") from None


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _render(doc: Tuned) -> None:
    from halo_cluster.cli.output import console, safe, table
    from halo_cluster.witness.tokens import tokens_word

    levels = [str(c) for c in doc.workload.levels]
    heads = [h for c in levels for h in (f"pred c{c}", f"meas c{c}", f"J/tok c{c}")]
    grid = table(f"halo tune {doc.model} ({doc.objective})", "layout", *heads, "tokens", "note")
    for row in doc.rows:
        predicted = row.predicted_tokens_per_s or {}
        cells = []
        for c in levels:
            rate = row.rate(c)
            cells.append(_cell(predicted.get(c)))
            cells.append(_cell(rate.tokens_per_s if rate else None))
            per = rate.joules_per_token if rate else None
            cells.append("-" if per is None else f"{per:.3f}")
        word = tokens_word(row.tokens)
        said = "DIFFERENT" if word == "different" else word or "-"
        grid.add_row(row.layout.name, *cells, said, safe(row.error or ""))
    console().print(grid)
    for line in _energy_lines(doc, levels):
        click.echo(line)
    click.echo(f"winner: {doc.reason}")


def _energy_lines(doc: Tuned, levels: list[str]) -> list[str]:
    """Each measured layout's energy line per level; one line where none has a number."""
    found = [
        (row.layout.name, c, rate.energy)
        for row in doc.rows
        for c in levels
        if (rate := row.rate(c)) is not None and rate.energy is not None
    ]
    if not found:
        return []
    if all(energy.joules_per_token is None for _n, _c, energy in found):
        lines = {energy.line() for _n, _c, energy in found}
        if len(lines) == 1:  # the same for every layout: said once
            return [lines.pop()]
    return [f"{name} c{c}: {energy.line()}" for name, c, energy in found]


@click.command("run")
@click.argument("model")
@config_option()
@click.option(
    "--engine",
    type=click.Choice(engine_registry.names()),
    help="Only this engine's layouts (default: every engine the model's files allow).",
)
@click.option(
    "--layout",
    help="Serve this layout ('vllm TP2', 'llama.cpp RPC2', …) instead of choosing one.",
)
@click.option(
    "--wait", "wait_s", default=900.0, show_default=True, help="Seconds to wait for /health."
)
@click.option(
    "--name",
    help="Serve it as this deployment beside the others (default with --nodes or --replicas: "
    "the model's store name); 'halo stop NAME' stops it.",
)
@click.option(
    "--nodes",
    metavar="A,B|A+B,C+D",
    help="The deployment's nodes: a,b (split into --replicas groups) or a+b,c+d (one replica "
    "per group). Default: nodes no other deployment uses.",
)
@click.option(
    "--replicas",
    type=click.IntRange(1, 32),
    help="Copies of the layout on disjoint nodes, each served, proven and supervised alone.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print {model, layout, reason, url, api_key_env, already_running, "
    "predicted_tokens_per_s, measured_tokens_per_s, serve, stopped, commands, energy, saved} "
    "as JSON; for a deployment {name, model, engine, layout, reason, replaced, state, "
    "replicas: [{index, nodes, url, proven, stopped, problems}], gateway}.",
)
def run_command(
    model: str,
    config_path: str | None,
    engine: str | None,
    layout: str | None,
    wait_s: float,
    name: str | None,
    nodes: str | None,
    replicas: int | None,
    as_json: bool,
) -> int:
    """From MODEL (a model directory or GGUF file here, a Hugging Face repo id, or a name of
    the nodes' stores) to a measured endpoint: choose the
    layout (the latest 'halo tune' winner for this model, else the planner's fastest
    predicted one that fits; --layout to choose), copy the model to every node's store,
    record the engine's one-node token reference when there is none, serve (supervised),
    prove it by every witness, then a short bench serve at concurrency 1 beside the
    prediction. Run again with nothing changed, it only checks the server and prints the
    endpoint; with another model or layout, the old server is stopped first.

    With --name, --nodes or --replicas it adds (or replaces) one named deployment and leaves
    the others serving: each replica on its own nodes and port, served, proven and
    supervised alone, and registered with the gateway ('halo gateway start')."""
    from halo_cluster.cli.cluster import cluster_handle
    from halo_cluster.config import results_dir
    from halo_cluster.recipes.run import run

    cluster = cluster_handle(config_path, as_json)
    if name or nodes or replicas:
        return _deploy(cluster, model, name, nodes, replicas, layout, engine, wait_s, as_json)
    out = run(cluster, model, layout, engine, results_dir(), _say(as_json), wait_s)
    saved = _save(cluster, out.to_result(cluster.config.name), None, "run")
    if as_json:
        emit_json({**out.to_json(), "saved": str(saved)})
        return 1 if out.stopped else 0
    _render_run(out)
    click.echo(f"saved {saved}")
    return 1 if out.stopped else 0


def _deploy(
    cluster: Any,
    model: str,
    name: str | None,
    nodes: str | None,
    replicas: int | None,
    layout: str | None,
    engine: str | None,
    wait_s: float,
    as_json: bool,
) -> int:
    from halo_cluster.cli.output import plain
    from halo_cluster.config import results_dir
    from halo_cluster.deploy.run import DeployRequest, deploy

    request = DeployRequest(model, name, nodes, replicas, layout, engine, wait_s)
    out = deploy(cluster, request, results_dir(), _say(as_json))
    if as_json:
        emit_json(out.to_json())
        return 0 if out.state == "serving" else 1
    click.echo(f"deployment {out.name}: {out.layout} x{len(out.replicas)} — {out.state}")
    for replica in out.replicas:
        said = "STOPPED" if replica.stopped else f"proven: {replica.proven or 'no'}"
        click.echo(f"  replica {replica.index} on {'+'.join(replica.nodes)} at {replica.url} "
                   f"({said})")  # fmt: skip
        for problem in replica.problems:
            click.echo(f"    problem: {plain(problem)}", err=True)
    gateway = out.gateway or {}
    if gateway.get("running"):
        click.echo(f"through the gateway: {gateway['url']} (model {out.name!r})")
    else:
        click.echo("the gateway is not running: 'halo gateway start' puts one endpoint in front")
    return 0 if out.state == "serving" else 1


def _render_run(out: Any) -> None:
    from halo_cluster.cli.output import plain

    click.echo(f"layout: {out.layout} — {plain(out.reason)}")
    if out.stopped:
        for problem in out.serve.get("problems", []):
            click.echo(f"  problem: {plain(problem)}", err=True)
        click.echo("halo: error: the witnesses refused the server: stopped", err=True)
        return
    said = "already serving" if out.already_running else "serving"
    click.echo(f"{said} {plain(out.model)} at {out.url}")
    if out.api_key_env:
        click.echo(f"API key: in ${out.api_key_env} (Authorization: Bearer …)")
    if not out.already_running:
        predicted = "-" if out.predicted_tokens_per_s is None else f"{out.predicted_tokens_per_s:g}"
        click.echo(
            f"tokens/s at concurrency 1: predicted {predicted}, measured "
            f"{out.measured_tokens_per_s:g}"
        )
        click.echo(out.energy_line)
        click.echo(f"proven: {out.serve.get('proven') or 'no'}")
    click.echo("next: " + "; ".join(out.commands))
