"""``halo bench``: benchmarks that answer the fabric question: serve load, net, collective
and TP replay. Options and the commands here; the tables in cli/bench_render.py, the node
side in node/main.py, the ranked runs' orchestration in bench/run.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import click

from halo_cluster.cli.bench_render import (
    collective_table,
    fail,
    net_table,
    serve_table,
    tp_table,
)
from halo_cluster.cli.options import choice_option, config_option, range_option, result_options
from halo_cluster.jsonout import emit_json

if TYPE_CHECKING:
    from halo_cluster.bench.cluster import BenchCluster
    from halo_cluster.bench.energy import Meter
    from halo_cluster.config import Config

F = TypeVar("F", bound=Callable[..., object])

BACKENDS = ("auto", "nccl", "gloo")  # torch.distributed's, auto: by whether ranks have GPUs


@click.group()
def bench() -> None:
    """Benchmarks; results are versioned JSON stamped with the cluster's plans."""


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: use a list like 1,4,16") from None
    if not levels or min(levels) < 1:
        raise click.BadParameter("concurrency levels must be >= 1")
    return levels


@bench.command("serve")
@click.option("--url", help="OpenAI-compatible server (default: the cluster's [serve] endpoint).")
@config_option("Cluster config (endpoint, API key, plans).")
@click.option("--model", help="Model id (default: the first of /v1/models).")
@click.option("--concurrency", default="1,4,16", show_default=True, help="Concurrency levels.")
@range_option("--prompts", default=32, low=1, high=100_000, help="Requests per level.")
@range_option(
    "--input-len",
    default=128,
    low=1,
    high=1_000_000,
    help="Prompt tokens per request, as the server counts them.",
)
@range_option(
    "--output-len",
    default=128,
    low=1,
    high=1_000_000,
    help="Output tokens per request (max_tokens, ignore_eos).",
)
@click.option("--seed", type=int, help="Seed of the random prompts (default: new ones each run).")
@range_option(
    "--warmup",
    default=1,
    low=0,
    high=100,
    help="Untimed warm-up requests before the first level (0: none).",
)
@click.option("--api-key-env", metavar="NAME", help="Environment variable holding the API key.")
@click.option(
    "--name",
    "deployment",
    help="A deployment's replica ('halo run --name'), asked directly with its worker key.",
)
@click.option(
    "--replica", default=0, show_default=True, type=click.IntRange(0, 31), help="With --name."
)
@result_options
def bench_serve(
    url: str | None,
    config_path: str | None,
    deployment: str | None,
    replica: int,
    model: str | None,
    concurrency: str,
    prompts: int,
    input_len: int,
    output_len: int,
    seed: int | None,
    warmup: int,
    api_key_env: str | None,
    out: str | None,
    as_json: bool,
) -> int:
    """Streaming load: TTFT, inter-token latency, time per output token, end-to-end latency
    (p50/p90/p99) and output tokens/s per concurrency level, measured as `vllm bench serve`
    measures them. With a cluster config, the head's server is reached at its address, or
    through an SSH tunnel when it listens on the head's loopback."""
    import contextlib

    from halo_cluster.bench import results
    from halo_cluster.bench.endpoint import Endpoint, reach
    from halo_cluster.bench.serve_load import measure
    from halo_cluster.bounded.redact import redact_url
    from halo_cluster.cli.output import plain
    from halo_cluster.cluster.state import read_state
    from halo_cluster.config import find_config, load_config, results_dir, secret
    from halo_cluster.errors import HaloError, UsageError
    from halo_cluster.facts.energy import NO_SOURCE

    levels = _levels(concurrency)
    path = find_config(config_path) if (config_path or not url) else None
    if path is None and not url:
        raise UsageError("give --url or a cluster config with a [serve] section")
    config = load_config(path) if path is not None else None
    if deployment is not None:
        from halo_cluster.deploy.units import deployment_unit
        from halo_cluster.runner.quote import WORKER_KEY_ENV

        if config is None:
            raise UsageError("--name needs the cluster config that served the deployment")
        config, api_key_env = deployment_unit(config, deployment, replica), WORKER_KEY_ENV
    plans = None
    proof = None
    key_env = api_key_env
    if config is not None:
        key_env = key_env or config.serve.api_key_env
        state = read_state(config)
        if state is not None:
            plans = {name: plan.to_dict() for name, plan in state.plans().items()}
            # what halo serve proved about the server measured here
            proof = state.to_dict().get("serve")
    say = _progress(as_json)
    meter = _meter(config)
    with contextlib.ExitStack() as stack:
        endpoint: Endpoint | None = None
        if not url:
            assert config is not None
            endpoint = stack.enter_context(reach(config, say))
        target = url or (endpoint.url if endpoint else "")
        try:
            run = measure(
                target, model, levels, prompts, input_len, output_len, secret(key_env), say,
                seed, warmup, meter,
            )  # fmt: skip
        except HaloError as err:
            where = f"{endpoint.route.node}'s server" if endpoint else redact_url(target)
            raise HaloError(f"{where}: {err}") from None
    result = run.to_dict()
    if deployment is not None:  # 'halo report --name' finds the deployment's results by it
        result["deployment"] = {"name": deployment, "replica": replica}
    if endpoint is not None:
        result["endpoint"] = endpoint.to_dict()
    if proof:
        result["serve_proof"] = proof
    result = results.stamp(result, plans)
    try:
        saved = results.save(result, out, results_dir(), "serve")
    except OSError as err:
        raise HaloError(f"cannot save the result: {err.strerror or err}") from None
    ok = all(level.errors == 0 for level in run.levels)
    if as_json:
        emit_json({**result, "saved": str(saved)})
        return 0 if ok else 1
    shown = redact_url(target)
    if endpoint is not None and endpoint.via == "ssh-tunnel":
        shown = f"{endpoint.to_dict()['server']} on {endpoint.route.node} (SSH tunnel)"
    serve_table(result, shown)
    if meter is None:
        click.echo(NOT_MEASURED)
    for level in run.levels if meter is not None else ():
        said = level.energy.line() if level.energy else NOT_MEASURED
        click.echo(f"concurrency {level.concurrency}: {said}")
    if meter is not None:  # a node not measured for another reason than no source: why
        for node, problem in meter.problems.items():
            if problem != NO_SOURCE:
                click.echo(f"  {node}: {plain(problem)}")
    click.echo(f"saved {saved}")
    return 0 if ok else 1


NOT_MEASURED = "energy: not measured (no nodes known: --url without a cluster config)"


def _meter(config: Config | None) -> Meter | None:
    """Every node's power over each level's window, where the cluster is known."""
    from halo_cluster.bench.energy import Meter, node_reader
    from halo_cluster.client.node import ssh_clients

    if config is None:
        return None
    return Meter([node.name for node in config.nodes], node_reader(ssh_clients(config)))


def _progress(quiet: bool) -> Callable[[str], None]:
    return (lambda _m: None) if quiet else (lambda m: click.echo(f"  {m}", err=True))


def _show(
    result: dict[str, object],
    saved: str | None,
    as_json: bool,
    render: Callable[[dict[str, object]], None],
) -> None:
    """A saved result: as JSON with where it was saved, or ``render``'s table and the path."""
    if as_json:
        emit_json({**result, "saved": saved})
    else:
        render(result)
        click.echo(f"saved {saved}")


def _ranked(
    config_path: str | None,
    spec: dict[str, object],
    steps: int,
    timeout: float,
    out: str | None,
    as_json: bool,
) -> tuple[dict[str, object], str | None, BenchCluster]:
    """Run ``spec`` on the cluster's ranks (``steps`` sizes or batches, each within
    ``timeout``): the result, where it was saved and the cluster. A run that ended early ends
    the command: its one line, its exit code."""
    from halo_cluster.bench.run import ranked_run

    limit = timeout * (steps + 4) + 60
    kind = str(spec["kind"])
    result, saved, failure, cluster = ranked_run(
        config_path, spec, limit, kind, out, _progress(as_json)
    )
    if failure is not None or result is None:
        raise click.exceptions.Exit(fail(failure or RuntimeError("no result"), saved))
    return result, saved, cluster


@bench.command("net")
@config_option("Cluster config (nodes, addresses).")
@click.option("--pair", metavar="A,B", help="Measure this pair only (default: every pair).")
@choice_option(
    "--path",
    "path_choice",
    choices=["mgmt", "fabric", "link", "rdma", "all"],
    default="all",
    help="Which network: management Ethernet, fabric TCP (on cabled nodes: between identities, "
    "one hop or more), each cable on its own (link: cabled nodes only), fabric RDMA (perftest).",
)
@range_option("--seconds", default=5.0, low=0.5, high=600)
@choice_option(
    "--latency-tool",
    choices=["auto", "sockperf", "qperf", "builtin"],
    default="auto",
    help="TCP latency tool; auto: sockperf, else qperf, else the built-in probe.",
)
@choice_option(
    "--bandwidth-tool",
    choices=["auto", "iperf3", "qperf", "builtin"],
    default="auto",
    help="TCP bandwidth tool; auto: iperf3, else qperf, else the built-in probe.",
)
@range_option("--streams", default=4, low=1, high=128)
@click.option("--no-bandwidth", is_flag=True, help="Measure latency only.")
@range_option("--port", default=18600, low=1024, high=64000)
@result_options
def bench_net(
    config_path: str | None,
    pair: str | None,
    path_choice: str,
    seconds: float,
    latency_tool: str,
    bandwidth_tool: str,
    streams: int,
    no_bandwidth: bool,
    port: int,
    out: str | None,
    as_json: bool,
) -> int:
    """Latency (p50/p99, one way) and bandwidth per node pair and path, with the peer tools
    (perftest, sockperf, qperf, iperf3) started on both ends over SSH."""
    from halo_cluster.bench import results
    from halo_cluster.bench.cluster import prepare
    from halo_cluster.bench.net import PATHS, NetBench
    from halo_cluster.bench.net_legs import pairs_of
    from halo_cluster.bench.run import save
    from halo_cluster.errors import HaloError

    progress = _progress(as_json)
    cluster = prepare(config_path, progress)
    runner = NetBench(
        cluster.config,
        cluster.clients,
        cluster.plans,
        cluster.inventories,
        seconds=seconds,
        latency_tool=latency_tool,
        bandwidth_tool=bandwidth_tool,
        streams=streams,
        port=port,
        bandwidth=not no_bandwidth,
        progress=progress,
    )
    paths = list(PATHS) if path_choice == "all" else [path_choice]
    failure: BaseException | None = None
    try:
        runner.run(pairs_of(cluster.config, pair), paths)
    except (KeyboardInterrupt, HaloError) as err:
        failure = err
    result = results.stamp(runner.result, cluster.plan_dicts(), cluster.stamp())
    saved = save(result, out, "net", failure) if result.get("paths") or not failure else None
    if failure is not None:
        return fail(failure, saved)
    _show(result, saved, as_json, net_table)
    return 1 if any(p["errors"] for p in result["paths"]) else 0


@bench.command("collective")
@config_option("Cluster config (Ray must be up).")
@click.option(
    "--sizes", default="8B:256MiB", show_default=True, help="FROM:TO (doubling) or a list."
)
@choice_option(
    "--backend",
    choices=BACKENDS,
    default="auto",
    help="auto: NCCL/RCCL when every rank has a GPU, else Gloo.",
)
@range_option("--iters", default=20, low=1, high=100_000)
@range_option("--warmup", default=5, low=0, high=10_000)
@range_option(
    "--timeout",
    default=60.0,
    low=1,
    high=3600,
    help="Seconds one size may take before the run stops and names the node that is gone.",
)
@click.option(
    "--allow-fallback", is_flag=True, help="Keep going when RDMA was planned but not used."
)
@result_options
def bench_collective(
    config_path: str | None,
    sizes: str,
    backend: str,
    iters: int,
    warmup: int,
    timeout: float,
    allow_fallback: bool,
    out: str | None,
    as_json: bool,
) -> int:
    """All-reduce sweep on one Ray actor per GPU (per node without GPUs) through
    torch.distributed: time, algorithm and bus bandwidth per size, an α/β fit, and (NCCL/RCCL)
    the transport verdict from the ranks' own debug logs."""
    from halo_cluster.bench.allreduce import SCHEMA, fallback_error, parse_sizes

    chosen = parse_sizes(sizes)
    spec = {
        "schema": SCHEMA,
        "kind": "collective",
        "sizes": chosen,
        "backend": backend,
        "iters": iters,
        "warmup": warmup,
        "timeout": timeout,
    }
    result, saved, cluster = _ranked(config_path, spec, len(chosen), timeout, out, as_json)
    transport = result["transport"]
    assert isinstance(transport, dict)
    refusal = fallback_error(any(p.is_rdma for p in cluster.plans.values()), transport)
    _show(result, saved, as_json, collective_table)
    if refusal and not allow_fallback:
        from halo_cluster.printable import printable

        click.echo(f"halo: error: {printable(refusal)}", err=True)
        return 1
    return 0


@bench.command("tp")
@click.argument("model")
@config_option("Cluster config (Ray must be up).")
@click.option("--tp", "tp", type=click.IntRange(2, 1024), help="Ranks (default: all of them).")
@click.option("--batch", "batches", default="1,8,32", show_default=True, help="Batch sizes.")
@range_option("--steps", default=20, low=1, high=100_000)
@choice_option("--backend", choices=BACKENDS, default="auto")
@range_option("--timeout", default=60.0, low=1, high=3600)
@result_options
def bench_tp(
    model: str,
    config_path: str | None,
    tp: int | None,
    batches: str,
    steps: int,
    backend: str,
    timeout: float,
    out: str | None,
    as_json: bool,
) -> int:
    """Replay a decode step's tensor-parallel communication for MODEL without weights
    (2·L + 2 all-reduces of batch × hidden bf16 values per token) and report the network's
    milliseconds per token and the tokens/s ceiling it implies. MODEL is a catalog id
    ('halo plan --list') or a path to a Hugging Face config.json."""
    from pathlib import Path

    from halo_cluster.bench.allreduce import TP_SCHEMA
    from halo_cluster.capacity.catalog import find_model
    from halo_cluster.capacity.hf_config import model_from_hf_config

    spec_model = (
        model_from_hf_config(Path(model))
        if model.endswith(".json") or "/" in model
        else find_model(model)
    )
    levels = _levels(batches)
    spec = {
        "schema": TP_SCHEMA,
        "kind": "tp",
        "model": {
            "id": model,
            "name": spec_model.name,
            "layers": spec_model.layers,
            "hidden": spec_model.hidden,
        },
        "batches": levels,
        "steps": steps,
        "backend": backend,
        "timeout": timeout,
        "tp": tp,
    }
    result, saved, _cluster = _ranked(config_path, spec, len(levels), timeout, out, as_json)
    _show(result, saved, as_json, tp_table)
    return 0
