"""``halo bench``: benchmarks that answer the fabric question (serve load for now)."""

from __future__ import annotations

import click

from halo_cluster.cli.output import emit_json, table


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
@click.option(
    "--config", "config_path", metavar="FILE", help="Cluster config (endpoint, API key, plans)."
)
@click.option("--model", help="Model id (default: the first of /v1/models).")
@click.option("--concurrency", default="1,4,16", show_default=True, help="Concurrency levels.")
@click.option(
    "--prompts",
    default=32,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Requests per level.",
)
@click.option("--input-len", default=128, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option("--output-len", default=128, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option("--api-key-env", metavar="NAME", help="Environment variable holding the API key.")
@click.option("--out", metavar="FILE", help="Result file (default: the results directory).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_serve(
    url: str | None,
    config_path: str | None,
    model: str | None,
    concurrency: str,
    prompts: int,
    input_len: int,
    output_len: int,
    api_key_env: str | None,
    out: str | None,
    as_json: bool,
) -> int:
    """Streaming load: TTFT, inter-token latency, end-to-end latency (p50/p90/p99) and output
    tokens/s per concurrency level."""
    from halo_cluster.bench import results
    from halo_cluster.bench.serve_load import run
    from halo_cluster.cluster.lifecycle import read_state
    from halo_cluster.config import find_config, load_config, results_dir, secret
    from halo_cluster.errors import UsageError

    levels = _levels(concurrency)
    path = find_config(config_path) if (config_path or not url) else None
    plans = None
    key_env = api_key_env
    if path is not None:
        config = load_config(path)
        serve = config.serve
        host = config.head.host if serve.host == "0.0.0.0" else serve.host
        url = url or f"http://{host}:{serve.port}"
        key_env = key_env or serve.api_key_env
        state = read_state(config) or {}
        plans = {name: node["plan"] for name, node in state.get("nodes", {}).items()}
    if not url:
        raise UsageError("give --url or a cluster config with a [serve] section")
    result = run(
        url,
        model,
        levels,
        prompts,
        input_len,
        output_len,
        secret(key_env),
        None if as_json else lambda m: click.echo(f"  {m}", err=True),
    )
    result = results.stamp(result, plans)
    saved = results.save(result, out, results_dir(), "serve")
    if as_json:
        emit_json({**result, "saved": str(saved)})
        return 0 if all(level["errors"] == 0 for level in result["levels"]) else 1
    from halo_cluster.cli.output import console

    grid = table(
        f"{result['model']} at {url}",
        "conc.",
        "requests",
        "errors",
        "TTFT p50/p99 ms",
        "ITL p50/p99 ms",
        "e2e p50/p99 ms",
        "output tok/s",
    )
    for level in result["levels"]:

        def pp(d: dict[str, float | None]) -> str:
            return f"{d['p50'] or 0:.1f} / {d['p99'] or 0:.1f}"

        grid.add_row(
            str(level["concurrency"]),
            str(level["requests"]),
            str(level["errors"]),
            pp(level["ttft_ms"]),
            pp(level["itl_ms"]),
            pp(level["e2e_ms"]),
            f"{level['output_tokens_per_s']:.1f}",
        )
    console().print(grid)
    click.echo(f"saved {saved}")
    return 0 if all(level["errors"] == 0 for level in result["levels"]) else 1
