"""Running a ranked benchmark (``halo bench collective`` / ``tp``) from the controller:
prepare the cluster, drive the head's bench driver, stamp the result with every node's plan
and save it, also when the run was cut short (the rows measured so far, marked incomplete).
The CLI only chooses the spec and renders."""

from __future__ import annotations

from collections.abc import Callable

from halo_cluster.bench import results
from halo_cluster.bench.cluster import BenchCluster, drive_remote, prepare
from halo_cluster.config import results_dir
from halo_cluster.errors import BenchError, BenchInterrupted, HaloError


def save(
    result: dict[str, object], out: str | None, kind: str, failure: BaseException | None
) -> str:
    """Save (also a partial result, marked incomplete); the path saved."""
    if failure is not None:
        reason = "interrupted (Ctrl-C)" if isinstance(failure, KeyboardInterrupt) else str(failure)
        result = {**result, "incomplete": reason}
    return str(results.save(result, out, results_dir(), kind))


def spec_nodes(cluster: BenchCluster) -> list[dict[str, object]]:
    config = cluster.config
    ordered = [config.head, *[n for n in config.nodes if n.name != config.head.name]]
    return [{"name": n.name, "address": n.address, "gpus": n.gpus} for n in ordered]


def ranked_run(
    config_path: str | None,
    spec: dict[str, object],
    limit_s: float,
    kind: str,
    out: str | None,
    progress: Callable[[str], None],
) -> tuple[dict[str, object] | None, str | None, BaseException | None, BenchCluster]:
    """Prepare, drive, stamp and save; (result, saved path, failure, cluster)."""
    cluster = prepare(config_path, progress)
    spec = {**spec, "nodes": spec_nodes(cluster)}
    plans = cluster.plan_dicts()
    try:
        body = drive_remote(cluster, spec, limit_s, progress)
    except (KeyboardInterrupt, HaloError) as err:
        rows = err.partial if isinstance(err, (BenchError, BenchInterrupted)) else None
        saved = None
        if rows:  # keep what was measured, marked incomplete
            key = "sweep" if kind == "collective" else "rows"
            partial = results.stamp({"schema": spec["schema"], "kind": kind, key: rows}, plans)
            saved = save(partial, out, kind, err)
        return None, saved, err, cluster
    result = results.stamp({"schema": spec["schema"], "kind": kind, **body}, plans, cluster.stamp())
    return result, save(result, out, kind, None), None, cluster
