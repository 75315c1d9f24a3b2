"""``halo results list|show`` and ``halo report``: the benchmark results kept on disk."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from halo_cluster.cli.output import safe, styled, table
from halo_cluster.jsonout import emit_json

DIR_HELP = "Results directory (default $XDG_DATA_HOME/halo/results)."


def _directory(directory: str | None) -> Path:
    from halo_cluster.config import results_dir

    return Path(directory) if directory else results_dir()


@click.group()
def results() -> None:
    """Benchmark results: one versioned JSON file per run."""


@results.command("list")
@click.option("--dir", "directory", metavar="DIR", help=DIR_HELP)
@click.option(
    "--kind", type=click.Choice(["net", "collective", "tp", "serve", "tune"]), help="Only these."
)
@click.option("--json", "as_json", is_flag=True, help="Print [{id, path, kind, created, …}].")
def results_list(directory: str | None, kind: str | None, as_json: bool) -> int:
    """Every result, oldest first, with a one-line summary."""
    from halo_cluster.bench.results import listing

    where = _directory(directory)
    rows = [r for r in listing(where) if kind is None or r.get("kind") == kind]
    if as_json:
        emit_json(rows)
        return 0
    if not rows:
        click.echo(f"no results in {where}")
        return 0
    from halo_cluster.cli.output import console

    grid = table(f"Results in {where}", "id", "kind", "created", "summary")
    for row in rows:
        if "error" in row:
            grid.add_row(row["id"], "-", "-", styled(f"[red]{safe(row['error'])}[/]"))
            continue
        note = " [yellow](incomplete)[/]" if row.get("incomplete") else ""
        grid.add_row(row["id"], row["kind"], row["created"] or "-", row["summary"] + note)
    console().print(grid)
    return 0


@results.command("show")
@click.argument("result")
@click.option("--dir", "directory", metavar="DIR", help=DIR_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the whole result file.")
def results_show(result: str, directory: str | None, as_json: bool) -> int:
    """Show RESULT: a file, an id from 'halo results list' (or a unique prefix), or
    latest / latest:KIND."""
    from halo_cluster.bench.results import load, resolve, summary

    path = resolve(result, _directory(directory))
    data = load(path)
    if as_json:
        emit_json(data)
        return 0
    from halo_cluster.cli import bench_render
    from halo_cluster.schema import stamp_hca

    kind = data.get("kind")
    click.echo(f"{path} ({data.get('schema')}, {data.get('created')})")
    if data.get("incomplete"):
        click.echo(f"incomplete: {data['incomplete']}")
    if kind == "net" and data.get("paths"):
        bench_render.net_table(data)
    elif kind == "collective" and data.get("sweep"):
        bench_render.collective_table(data)
    elif kind == "tp" and data.get("rows"):
        bench_render.tp_table(data)
    else:
        click.echo(summary(data))
    nodes = data.get("nodes") or {}
    for name, node in nodes.items():
        click.echo(
            f"  {name}: {node.get('hostname')} {node.get('transport')}"
            f" {stamp_hca(node) or node.get('socket_ifname') or ''} MTU {node.get('mtu')}"
            f" fabric {node.get('fabric_address')}"
        )
    return 0


@click.command()
@click.argument("result_refs", metavar="RESULT...", nargs=-1)
@click.option("-o", "--output", default="halo-report.html", show_default=True, metavar="FILE")
@click.option("--title", default="halo fabric report", show_default=True)
@click.option("--dir", "directory", metavar="DIR", help=DIR_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print {output, results} as JSON.")
@click.option(
    "--name",
    "deployment",
    help="Every result of this deployment in the directory ('halo bench serve --name'), "
    "besides any RESULT given.",
)
def report(
    result_refs: tuple[str, ...],
    output: str,
    title: str,
    directory: str | None,
    as_json: bool,
    deployment: str | None,
) -> int:
    """One self-contained HTML file (no network needed to view it) from RESULT files or ids
    (or --name: a deployment's results): latency and bandwidth per path, all-reduce time and
    bus bandwidth over message size, network cost per token per model, and every run's plan
    stamp."""
    from halo_cluster.bench.results import load, resolve, write_file
    from halo_cluster.errors import UsageError
    from halo_cluster.report import render

    where = _directory(directory)
    if not result_refs and deployment is None:
        raise UsageError("give RESULT files or ids, or --name DEPLOYMENT")
    paths = [resolve(ref, where) for ref in result_refs]
    if deployment is not None:
        paths += [p for p in _of_deployment(where, deployment) if p not in paths]
    loaded = [{**load(p), "label": p.stem} for p in paths]
    for path, data in zip(paths, loaded, strict=True):
        try:  # a result of the right schema but the wrong shape is named, not a traceback
            render([data], title)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
            raise UsageError(f"{path}: not a complete {data['schema']} result ({err!r})") from None
    page = render(loaded, title)
    target = Path(output)
    on_stdout = write_file(target, page)  # -o /dev/stdout > file: the page alone on stdout
    if as_json:
        emit_json(
            {"output": str(target), "results": [str(p) for p in paths]},
            sys.stderr if on_stdout else None,
        )
    else:
        click.echo(f"wrote {target} from {len(paths)} result(s)", err=on_stdout)
    return 0


def _of_deployment(where: Path, name: str) -> list[Path]:
    """The results in ``where`` that 'halo bench serve --name NAME' wrote, oldest first;
    none is one line that says how to make one."""
    from halo_cluster.bench.results import listing, load
    from halo_cluster.errors import UsageError

    found = []
    for row in listing(where):
        if "error" in row:
            continue
        path = Path(row["path"])
        tag = load(path).get("deployment")
        if isinstance(tag, dict) and tag.get("name") == name:
            found.append(path)
    if not found:
        raise UsageError(
            f"no result of deployment {name!r} in {where} ('halo bench serve --name {name}' "
            "writes one)"
        )
    return found
