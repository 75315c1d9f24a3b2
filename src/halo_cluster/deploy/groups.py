"""Which nodes each replica of a deployment gets, and the port each serves on.

``--nodes a+b,c+d`` names the groups (one replica each); ``--nodes a,b,c,d --replicas 2``
splits the nodes in order into equal groups; ``--nodes a,b`` alone is one replica on both.
Without ``--nodes``, halo takes ``replicas`` groups of the layout's size from the nodes no
other deployment uses, in the config's order, and refuses in one line when too few are free.
A replica's port is the first from ``[serve] port`` up that no other deployment's replica
sharing one of its nodes already uses."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from halo_cluster.cluster.deployments import Deployment, Replica
from halo_cluster.errors import UsageError

MAX_PORT_TRIES = 100


def parse_groups(text: str, known: Sequence[str], replicas: int | None) -> list[tuple[str, ...]]:
    """The node groups ``--nodes`` names (see the module's docstring)."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise UsageError(f"--nodes {text!r}: give node names, e.g. a,b or a+b,c+d")
    groups = [tuple(n.strip() for n in part.split("+")) for part in parts]
    names = [n for group in groups for n in group]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"--nodes: no node named {unknown[0]!r} (nodes: {', '.join(known)})")
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise UsageError(f"--nodes: {twice} appears twice: replicas run on disjoint nodes")
    if any(len(g) > 1 for g in groups):
        if replicas is not None and replicas != len(groups):
            raise UsageError(f"--nodes names {len(groups)} group(s) but --replicas is {replicas}")
        if len({len(g) for g in groups}) > 1:
            raise UsageError("--nodes: every replica's group has as many nodes (one layout)")
        return groups
    count = replicas or 1
    if len(names) % count:
        raise UsageError(f"--nodes: {len(names)} node(s) do not split into {count} equal replicas")
    size = len(names) // count
    return [tuple(names[i * size : (i + 1) * size]) for i in range(count)]


def free_groups(
    nodes: Sequence[str], others: Iterable[Deployment], size: int, replicas: int
) -> list[tuple[str, ...]]:
    """``replicas`` groups of ``size`` nodes that no other deployment uses."""
    used = {n for d in others for n in d.nodes()}
    free = [n for n in nodes if n not in used]
    if len(free) < size * replicas:
        busy = ", ".join(sorted(used)) or "none"
        raise UsageError(
            f"{replicas} replica(s) of {size} node(s) need {size * replicas} free nodes; "
            f"{len(free)} are free (in use by other deployments: {busy}): "
            "name the nodes with --nodes to share them, or stop a deployment"
        )
    return [tuple(free[i * size : (i + 1) * size]) for i in range(replicas)]


def place(
    groups: Sequence[tuple[str, ...]], others: Iterable[Deployment], base_port: int
) -> tuple[Replica, ...]:
    """The replicas: each group with the first port its nodes do not already serve on."""
    taken: dict[str, set[int]] = {}
    for other in others:
        for replica in other.replicas:
            for node in replica.nodes:
                taken.setdefault(node, set()).add(replica.port)
    placed = []
    for index, group in enumerate(groups):
        used = set().union(*(taken.get(n, set()) for n in group))
        port = next(
            (p for p in range(base_port, base_port + MAX_PORT_TRIES) if p not in used), None
        )
        if port is None or port > 65535:
            raise UsageError(f"no free port from {base_port} on {'+'.join(group)}")
        placed.append(Replica(index, group, port))
    return tuple(placed)
