"""Replicas in the planner (pure arithmetic; see docs/plan.md, "Replicas").

N nodes can serve R = N // k copies of a k-node layout, each on its own nodes, with the
gateway spreading requests over them. No new performance model: a replica is the planner's
own k-node layout (``estimate.evaluate``) at the concurrency it carries. One request sees
one replica, so the concurrency-1 figure is the layout's own; ``--batch B`` requests spread
evenly put ceil(B/R) on some replicas and floor(B/R) on the rest, and the replicas' rates add.
Memory is checked per replica, on its own nodes, at the load of the busiest one.
"""

from __future__ import annotations

from dataclasses import replace

from halo_cluster.capacity.estimate import Request, Row, engine_layouts, evaluate


def replica_counts(nodes: int) -> list[tuple[int, int]]:
    """(nodes per replica k, replicas R) for every k < ``nodes`` that leaves room for at
    least two replicas: R = nodes // k (the nodes left over when k does not divide stay idle)."""
    return [(k, nodes // k) for k in range(1, nodes // 2 + 1)]


def spread(batch: int, replicas: int) -> list[tuple[int, int]]:
    """``batch`` requests spread evenly over ``replicas``: (concurrency, replicas carrying
    it), the busiest first; replicas left without a request are not listed."""
    low, extra = divmod(batch, replicas)
    loads = [(low + 1, extra), (low, replicas - extra)]
    return [(concurrency, count) for concurrency, count in loads if concurrency and count]


def replica_rows(req: Request, one_node: bool = True) -> list[Row]:
    """A row for each layout on k nodes of every k in ``replica_counts(req.nodes)``, as R
    replicas. ``one_node=False`` leaves out the one-node replicas, which cross no link (the
    caller shows them for its first link only)."""
    rows: list[Row] = []
    for k, count in replica_counts(req.nodes):
        if k == 1 and not one_node:
            continue
        each = replace(req, nodes=k)
        rows.extend(replica_row(each, count, name, tp, pp) for name, tp, pp in engine_layouts(each))
    return rows


def replica_row(each: Request, replicas: int, name: str, tp: int, pp: int) -> Row:
    """``replicas`` copies of layout ``name`` (``each``: one replica's nodes, the cluster's
    ``--batch``). The memory, the step's milliseconds and the network share are the busiest
    replica's; tokens/s at ``--batch`` sums every busy replica's rate at its own concurrency."""
    loads = spread(each.batch, replicas)
    rated = [(evaluate(replace(each, batch=c), tp, pp, name), count) for c, count in loads]
    busiest = rated[0][0]
    return replace(
        busiest,
        layout=f"{replicas} x {name}",
        tokens_per_s=sum(row.tokens_per_s * count for row, count in rated),
        tokens_per_s_low=sum(row.tokens_per_s_low * count for row, count in rated),
        tokens_per_s_high=sum(row.tokens_per_s_high * count for row, count in rated),
        replicas=replicas,
        note=_note(name, each.nodes, replicas, each.batch, loads),
    )


def _note(name: str, nodes: int, replicas: int, batch: int, loads: list[tuple[int, int]]) -> str:
    """How a replica row was computed, in one sentence."""
    busy = [f"{count} at concurrency {c}" for c, count in loads]
    idle = replicas - sum(count for _c, count in loads)
    if idle:
        busy.append(f"{idle} idle")
    return (
        f"{replicas} replicas of {name}, {nodes} node{'s' if nodes > 1 else ''} each; "
        f"b=1: one request on one replica ({name}'s own figure); batch {batch} spread evenly: "
        f"{' + '.join(busy)}, each {name}'s prediction at its concurrency, summed; "
        "memory, ms and network share: the busiest replica's"
    )
