"""The models on the nodes' stores: what each node holds (``halo model ls``), a re-hash
everywhere (``verify``), removal (``rm``), and what ``serve`` needs: a model's name turned
into each node's path, refused with one line when a node that reads it lacks it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from halo_cluster.client.fanout import fan_out
from halo_cluster.cluster.handle import Cluster
from halo_cluster.errors import ModelError
from halo_cluster.modelstore.manifest import NAME
from halo_cluster.wire.commands import MODEL_LIST, MODEL_RM, MODEL_VERIFY

VERIFY_TIMEOUT_S = 6 * 3600.0


def store_listing(cluster: Cluster, nodes: list[str]) -> dict[str, Any]:
    """{node: {"models": [...]} or {"error": ...}} (no hashing: one round trip per node)."""
    store = cluster.config.models.dir
    out: dict[str, Any] = {}
    for outcome in fan_out(
        nodes, lambda n: cluster.client(n).call_json(*MODEL_LIST.argv(store=store))
    ):
        if outcome.error is not None:
            out[outcome.item] = {"error": str(outcome.error)}
        else:
            value = outcome.value if isinstance(outcome.value, dict) else {}
            out[outcome.item] = {"models": value.get("models") or []}
    return out


def model_table(listing: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per model: on which nodes it is complete, and whether they all hold the same
    content (the digest most nodes hold is the reference; the others differ)."""
    names: dict[str, dict[str, Any]] = {}
    for node, held in listing.items():
        for model in held.get("models") or []:
            row = names.setdefault(
                model["name"], {"name": model["name"], "nodes": {}, "size": None, "source": None}
            )
            row["nodes"][node] = {
                "complete": bool(model.get("complete")),
                "digest": model.get("digest"),
                "files": model.get("files"),
                "changed": model.get("changed") or [],
            }
            if model.get("complete"):
                row["size"] = model.get("size")
                row["source"] = model.get("source")
    for row in names.values():
        digests = [n["digest"] for n in row["nodes"].values() if n["complete"]]
        reference = max(set(digests), key=digests.count) if digests else None
        for node in listing:
            held = row["nodes"].get(node)
            if "error" in listing[node]:
                state = "unreachable"
            elif held is None:
                state = "missing"
            elif not held["complete"]:
                state = "incomplete"
            elif held["changed"]:
                state = "changed"
            else:
                state = "same" if held["digest"] == reference else "different"
            row["nodes"].setdefault(
                node, {"complete": False, "digest": None, "files": None, "changed": []}
            )
            row["nodes"][node]["state"] = state
        row["digest"] = reference
    return sorted(names.values(), key=lambda r: r["name"])


def verify(cluster: Cluster, name: str, nodes: list[str]) -> dict[str, Any]:
    """Every node re-reads every file of ``name`` (in parallel): {node: answer or error}."""
    store = cluster.config.models.dir
    argv = MODEL_VERIFY.argv(store=store, name=name)
    out: dict[str, Any] = {}
    for outcome in fan_out(
        nodes, lambda n: cluster.client(n).call_json(*argv, timeout=VERIFY_TIMEOUT_S)
    ):
        out[outcome.item] = (
            {"error": str(outcome.error)} if outcome.error is not None else outcome.value
        )
    return out


def remove(cluster: Cluster, name: str, nodes: list[str]) -> dict[str, Any]:
    store = cluster.config.models.dir
    argv = MODEL_RM.argv(store=store, name=name)
    out: dict[str, Any] = {}
    for outcome in fan_out(nodes, lambda n: cluster.client(n).call_json(*argv)):
        if outcome.error is not None:
            out[outcome.item] = {"error": str(outcome.error)}
        else:
            out[outcome.item] = {"removed": bool((outcome.value or {}).get("removed"))}
    return out


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
    rows = {row["name"]: row for row in model_table(listing)}
    row = rows.get(name)
    if row is None and not any("error" in listing[n] for n in readers):
        return None
    store = cluster.config.models.dir
    fix_source = (row or {}).get("source") or "SOURCE"
    for node in readers:
        held = listing[node]
        if "error" in held:
            raise ModelError(f"{node}: cannot read its model store: {held['error']}")
        state = (row or {}).get("nodes", {}).get(node, {}).get("state", "missing")
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
    entry = ""
    for model in listing[readers[0]]["models"]:
        if model["name"] == name:
            entry = model.get("entry") or ""
            path = str(model["path"])
    path = f"{path}/{entry}" if entry else path
    return Resolved(name, path, str(row["digest"]), str(row["source"] or ""))
