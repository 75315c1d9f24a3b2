"""``halo model``: the same weights on every node's own disk, sent once over the fabric and
verified (``sync``); what each node holds (``ls``); a re-hash everywhere (``verify``);
removal (``rm``)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import click

from halo_cluster.cli.options import config_option, json_option
from halo_cluster.jsonout import emit_json

if TYPE_CHECKING:
    from halo_cluster.models.stores import Copy

MIB = 1 << 20


def _cluster(config_path: str | None, quiet: bool):  # type: ignore[no-untyped-def]
    from halo_cluster.cli.cluster import cluster_handle

    return cluster_handle(config_path, quiet)


def _nodes(cluster: Any, nodes: str | None) -> list[str]:
    """--nodes a,b (each a configured node), else every node."""
    if not nodes:
        return [n.name for n in cluster.config.nodes]
    chosen = [n.strip() for n in nodes.split(",") if n.strip()]
    for name in chosen:
        cluster.config.node(name)  # a UsageError naming the known nodes
    return list(dict.fromkeys(chosen))


_NODES = click.option("--nodes", metavar="A,B", help="Only these nodes (default: every node).")


@click.group()
def model() -> None:
    """Models on every node's own disk ([models] dir, default /var/lib/halo/models): sent
    once over the fabric, verified by sha256, resumable; 'halo serve NAME' then serves a
    model by its name from each node's store."""


class _Meter:
    """Progress lines on stderr: hashing, then bytes, rate and ETA per node."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.every = 1.0 if sys.stderr.isatty() else 5.0
        self.last = 0.0
        self.hashed = 0
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        if not self.quiet:
            click.echo(f"  {text}", err=True)

    def _due(self) -> bool:
        now = time.monotonic()
        if now - self.last < self.every:
            return False
        self.last = now
        return True

    def hashing(self, size: int) -> None:
        self.hashed += size
        if self._due():
            rate = self.hashed / max(time.monotonic() - self.started, 1e-6) / 1e6
            self.say(f"hashing the source: {self.hashed / MIB:.0f} MiB ({rate:.0f} MB/s)")

    def hops(self, hops: dict[str, Any]) -> None:
        if not self._due():
            return
        parts = []
        for name, hop in hops.items():
            if not name or not hop.total:
                continue
            seconds = max(time.monotonic() - self.started, 1e-6)
            rate = hop.received / seconds
            left = (hop.total - hop.received) / rate if rate > 0 else float("inf")
            eta = f"ETA {left:.0f} s" if left != float("inf") else "waiting"
            parts.append(
                f"{name} {hop.received / MIB:.0f}/{hop.total / MIB:.0f} MiB "
                f"{rate / 1e6:.0f} MB/s {eta}"
            )
        if parts:
            self.say("; ".join(parts))


@model.command()
@click.argument("source")
@click.option("--name", help="The model's name in the stores (default: from SOURCE).")
@_NODES
@config_option()
@json_option(
    "Print {name, digest, size, files, source, seconds, sent, mb_s, cpu_s_per_gb, ok, nodes: "
    "{node: {status, bytes, written, received, seconds, mb_s, cpu_s, cpu_s_per_gb, ...}}} as JSON."
)
def sync(
    source: str, name: str | None, nodes: str | None, config_path: str | None, as_json: bool
) -> int:
    """Copy SOURCE to every node's store. SOURCE: a directory or GGUF file here (a split
    GGUF's first shard brings the rest), NODE:PATH on a node, or a Hugging Face repo id
    (org/name[@revision]) from the local Hugging Face cache, downloaded where the hub is
    reachable. Hashed once (sha256, kept by size, mtime and inode); only the files a node
    lacks or holds different are sent, through one chain over the nodes' fabric addresses
    (each node writes and forwards at once); a node holding the same model costs one round
    trip. Files land as partials, verified, then renamed; an interrupted sync resumes.
    Exit 1 when a node could not be synced."""
    from halo_cluster.models.source import expected_name, resolve_source
    from halo_cluster.models.sync import StateAhead, Sync
    from halo_cluster.modelstore.manifest import check_name

    if name is not None:
        check_name(name)
    cluster = _cluster(config_path, as_json)
    targets = _nodes(cluster, nodes)
    meter = _Meter(as_json)
    meter.say(f"hashing {source}")
    expected = name or expected_name(cluster, source)
    ahead = StateAhead(cluster, targets, expected) if expected else None
    try:
        found = resolve_source(cluster, source, name, meter.hashing)
    except BaseException:
        if ahead is not None:  # its round trips end before this does: nothing left running
            ahead.wait()
        raise
    manifest = found.manifest
    meter.say(
        f"{manifest.name}: {len(manifest.files)} file(s), {manifest.size / MIB:.1f} MiB, "
        f"sha256 of the whole {manifest.digest[:12]}…"
    )
    meter.started = time.monotonic()
    result = Sync(cluster, found, targets, meter.hops, ahead).run()
    if as_json:
        emit_json(result.to_dict())
    else:
        _print_sync(result.to_dict())
    return 0 if result.ok else 1


def _print_sync(data: dict[str, Any]) -> None:
    from halo_cluster.cli.output import plain

    click.echo(
        f"{data['name']} ({data['files']} file(s), {data['size'] / MIB:.1f} MiB) from "
        f"{plain(data['source'])} in {data['seconds']:.1f} s"
    )
    for node, row in data["nodes"].items():
        if row["status"] == "same":
            click.echo(f"  {node}: already the same")
        elif row["status"] == "synced":
            resumed = f", {row['resumed'] / MIB:.1f} MiB resumed" if row["resumed"] else ""
            cpu = f", {row['cpu_s_per_gb']:.2f} CPU s/GB" if row["cpu_s_per_gb"] is not None else ""
            click.echo(
                f"  {node}: synced {row['files']} file(s), {row['written'] / MIB:.1f} MiB "
                f"written ({row['mb_s'] or 0:.0f} MB/s{cpu}){resumed}"
            )
        else:
            click.echo(f"  {node}: {row['status'].upper()}: {plain(row['reason'])}")
    controller = data["cpu_s_per_gb"]["controller"]
    if controller is not None:
        click.echo(f"  this machine: {controller:.2f} CPU s/GB sent")
    if data.get("left_out"):
        shown = ", ".join(plain(path) for path in data["left_out"])
        click.echo(f"  left out (hidden files no engine reads): {shown}")


@model.command(name="ls")
@_NODES
@config_option()
@json_option(
    "Print {store, models: [{name, size, source, digest, nodes: {node: {state}}}], rpc_cache: "
    "{node: {files, bytes}}, unreachable} as JSON."
)
def ls_command(nodes: str | None, config_path: str | None, as_json: bool) -> int:
    """Every model in the nodes' stores: on each node same (as the others), different,
    incomplete, missing, or unreachable. Reads no file's content (see 'verify')."""
    from halo_cluster.models.stores import Unreadable, model_table, store_listing

    cluster = _cluster(config_path, True)
    chosen = _nodes(cluster, nodes)
    listing = store_listing(cluster, chosen)
    rows = model_table(listing)
    errors = {n: v.error for n, v in listing.items() if isinstance(v, Unreadable)}
    caches = {
        n: v.rpc_cache
        for n, v in listing.items()
        if not isinstance(v, Unreadable) and v.rpc_cache is not None
    }
    if as_json:
        emit_json(
            {
                "store": cluster.config.models.dir,
                "models": [row.to_dict() for row in rows],
                "rpc_cache": {n: {"files": c.files, "bytes": c.bytes} for n, c in caches.items()},
                "unreachable": errors,
            }
        )
        return 0
    from halo_cluster.cli.output import console, plain, table

    grid = table(f"Models in {cluster.config.models.dir}", "model", "size", *chosen, "source")
    for row in rows:
        size = "-" if row.size is None else f"{row.size / MIB:.1f} MiB"
        states = (_state(row.nodes[n]) for n in chosen)
        grid.add_row(plain(row.name), size, *states, plain(row.source or "-"))
    console().print(grid)
    held = [f"{n} {c.bytes / MIB:.1f} MiB" for n, c in caches.items() if c.files]
    if held:
        click.echo(f"llama.cpp RPC tensor cache ([serve.llama_cpp] cache_gib): {', '.join(held)}")
    for node, error in errors.items():
        click.echo(f"{node}: unreachable: {error}", err=True)
    return 0


def _state(copy: Copy) -> str:
    return f"{len(copy.changed)} file(s) changed" if copy.state == "changed" else copy.state


@model.command()
@click.argument("name")
@_NODES
@config_option()
@json_option("Print {node: {name, digest, files, differ: [{path, reason}]} or {error}} as JSON.")
def verify(name: str, nodes: str | None, config_path: str | None, as_json: bool) -> int:
    """Re-read every file of NAME on every node (in parallel) against its manifest, and
    name each file that differs. Exit 1 when one differs or a node cannot tell."""
    from halo_cluster.cli.output import plain
    from halo_cluster.models.stores import Unreadable
    from halo_cluster.models.stores import verify as verify_all
    from halo_cluster.modelstore.manifest import check_name

    check_name(name)
    cluster = _cluster(config_path, True)
    answers = verify_all(cluster, name, _nodes(cluster, nodes))
    if as_json:
        emit_json({node: answer.to_dict() for node, answer in answers.items()})
    bad = False
    for node, answer in answers.items():
        if isinstance(answer, Unreadable):
            bad = True
            lines = [f"{node}: {plain(answer.error)}"]
        else:
            bad = bad or bool(answer.differ)
            lines = [f"{node}: DIFFERS {plain(d.path)}: {plain(d.reason)}" for d in answer.differ]
            lines = lines or [f"{node}: {answer.files} file(s) verified"]
        if not as_json:
            click.echo("\n".join(lines))
    return 1 if bad else 0


@model.command()
@click.argument("name")
@_NODES
@config_option()
@json_option("Print {node: {removed} or {error}} as JSON.")
def rm(name: str, nodes: str | None, config_path: str | None, as_json: bool) -> int:
    """Remove NAME from the nodes' stores (partials too). Exit 1 when a node could not."""
    from halo_cluster.cli.output import plain
    from halo_cluster.models.stores import Unreadable, remove
    from halo_cluster.modelstore.manifest import check_name

    check_name(name)
    cluster = _cluster(config_path, True)
    answers = remove(cluster, name, _nodes(cluster, nodes))
    said = {
        node: a.to_dict() if isinstance(a, Unreadable) else {"removed": a.removed}
        for node, a in answers.items()
    }
    if as_json:
        emit_json(said)
    else:
        for node, answer in answers.items():
            what = (
                answer.error if isinstance(answer, Unreadable)
                else "removed" if answer.removed else "not there"
            )  # fmt: skip
            click.echo(f"{node}: {plain(what)}")
    return 1 if any(isinstance(a, Unreadable) for a in answers.values()) else 0
