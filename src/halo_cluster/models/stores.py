"""The models on the nodes' stores: what each node holds (``halo model ls``), a re-hash
everywhere (``verify``), removal (``rm``), and what ``serve`` needs: a model's name turned
into each node's path, refused with one line when a node that reads it lacks it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from halo_cluster.client.fanout import fan_out
from halo_cluster.cluster.handle import Cluster
from halo_cluster.errors import ModelError
from halo_cluster.jsonout import JsonObject
from halo_cluster.modelstore.answers import (
    Listing,
    Removed,
    Verified,
    parse_listing,
    parse_removed,
    parse_verified,
)
from halo_cluster.modelstore.manifest import NAME
from halo_cluster.wire.commands import MODEL_LIST, MODEL_RM, MODEL_VERIFY

VERIFY_TIMEOUT_S = 6 * 3600.0


@dataclass(frozen=True)
class Unreadable:
    """A node that gave no answer, or one that does not read (that node's alone)."""

    error: str

    def to_dict(self) -> dict[str, str]:
        return {"error": self.error}


T = TypeVar("T")


def _ask(
    cluster: Cluster, nodes: list[str], argv: list[str], parse: Callable[[Any], T],
    timeout: float = 60.0,
) -> dict[str, T | Unreadable]:  # fmt: skip
    """Every node at once; each answer read by ``parse``, or that node's ``Unreadable``."""

    def one(node: str) -> T | Unreadable:
        answer = cluster.client(node).call_json(*argv, timeout=timeout)
        try:
            return parse(answer)
        except ModelError as err:
            return Unreadable(f"{node}: an answer halo cannot read: {err}")

    return {
        o.item: Unreadable(str(o.error)) if o.error is not None else cast("T | Unreadable", o.value)
        for o in fan_out(nodes, one)
    }


def store_listing(cluster: Cluster, nodes: list[str]) -> dict[str, Listing | Unreadable]:
    """What each node's store holds (no hashing: one round trip per node)."""
    return _ask(cluster, nodes, MODEL_LIST.argv(store=cluster.config.models.dir), parse_listing)


@dataclass
class Copy:
    """One node's copy of a model, as ``halo model ls`` shows it."""

    state: str  # same, different, incomplete, changed, missing, unreachable
    complete: bool = False
    digest: str | None = None
    files: int | None = None
    changed: tuple[str, ...] = ()

    def to_dict(self) -> JsonObject:
        return {"complete": self.complete, "digest": self.digest, "files": self.files,
                "changed": list(self.changed), "state": self.state}  # fmt: skip


@dataclass
class ModelRow:
    """A model across the nodes: each node's copy, and the content most complete copies
    hold (the reference: the others differ)."""

    name: str
    nodes: dict[str, Copy]
    size: int | None = None
    source: str | None = None
    digest: str | None = None

    def to_dict(self) -> JsonObject:
        return {"name": self.name, "nodes": {n: c.to_dict() for n, c in self.nodes.items()},
                "size": self.size, "source": self.source, "digest": self.digest}  # fmt: skip


def model_table(listing: dict[str, Listing | Unreadable]) -> list[ModelRow]:
    """One row per model: on which nodes it is complete, and whether they all hold the same
    content (the digest most nodes hold is the reference; the others differ)."""
    rows: dict[str, ModelRow] = {}
    for node, held in listing.items():
        for model in [] if isinstance(held, Unreadable) else held.models:
            row = rows.setdefault(model.name, ModelRow(model.name, {}))
            row.nodes[node] = Copy("", model.complete, model.digest, model.files,
                                   model.changed or ())  # fmt: skip
            if model.complete:
                row.size, row.source = model.size, model.source
    for row in rows.values():
        digests = [c.digest for c in row.nodes.values() if c.complete]
        row.digest = max(set(digests), key=digests.count) if digests else None
        for node in listing:
            copy = row.nodes.setdefault(node, Copy("missing"))
            copy.state = _state(copy, isinstance(listing[node], Unreadable), row.digest)
    return sorted(rows.values(), key=lambda r: r.name)


def _state(copy: Copy, unreachable: bool, reference: str | None) -> str:
    if unreachable:
        return "unreachable"
    if copy.state == "missing":
        return "missing"
    if not copy.complete:
        return "incomplete"
    if copy.changed:
        return "changed"
    return "same" if copy.digest == reference else "different"


def verify(cluster: Cluster, name: str, nodes: list[str]) -> dict[str, Verified | Unreadable]:
    """Every node re-reads every file of ``name`` (in parallel)."""
    argv = MODEL_VERIFY.argv(store=cluster.config.models.dir, name=name)
    return _ask(cluster, nodes, argv, parse_verified, VERIFY_TIMEOUT_S)


def remove(cluster: Cluster, name: str, nodes: list[str]) -> dict[str, Removed | Unreadable]:
    argv = MODEL_RM.argv(store=cluster.config.models.dir, name=name)
    return _ask(cluster, nodes, argv, parse_removed)


# -- serving a model by name ------------------------------------------------------------------
@dataclass(frozen=True)
class Resolved:
    name: str
    path: str  # what the engine opens on every node (the same store path everywhere)
    digest: str
    source: str


def is_store_name(model: str) -> bool:
    """A name of the store (``tiny``), not a path (``/m/x``, ``./x``, ``x.gguf``) or a
    Hugging Face id (``org/name``): names have no '/' and are not a GGUF file's name."""
    return (
        "/" not in model
        and bool(NAME.match(model))
        and ".." not in model
        and not model.endswith(".gguf")
    )


def resolve(cluster: Cluster, name: str, readers: list[str]) -> Resolved | None:
    """``name`` on every node of ``readers`` (the nodes whose engine opens the weights):
    complete and the same content everywhere, else one line naming the node, what is wrong,
    and the sync that fixes it. None when no node's store holds anything of that name: the
    name is then the engine's own (a Hugging Face id such as ``gpt2``)."""
    # every node listed: one that is not a reader may still name where the model came from
    listing = store_listing(cluster, [n.name for n in cluster.config.nodes])
    row = next((r for r in model_table(listing) if r.name == name), None)
    if row is None and not any(isinstance(listing[n], Unreadable) for n in readers):
        return None
    store = cluster.config.models.dir
    fix_source = (row.source if row else None) or "SOURCE"
    for node in readers:
        held = listing[node]
        if isinstance(held, Unreadable):
            raise ModelError(f"{node}: cannot read its model store: {held.error}")
        state = row.nodes[node].state if row else "missing"
        if state == "same":
            continue
        what = {
            "missing": f"has no model {name} in {store}",
            "incomplete": f"holds an incomplete copy of {name} (a sync did not finish)",
            "different": f"holds a different {name} than the other nodes",
            "changed": f"holds {name} with files changed since they were verified",
        }.get(state, f"cannot tell whether it holds {name}")
        raise ModelError(
            f"{node} {what}: run 'halo model sync {fix_source} --name {name} --nodes {node}'"
        )
    assert row is not None
    first = listing[readers[0]]
    assert isinstance(first, Listing)
    model = next(m for m in first.models if m.name == name)
    path = f"{model.path}/{model.entry}" if model.entry else model.path
    return Resolved(name, path, str(row.digest), row.source or "")
