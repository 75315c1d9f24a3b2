"""A node's answers about its model store, as typed values with one parser each, used by both
sides: what it holds (``model-list``: a ``Listing`` of ``StoredModel``s), a re-read of one model
(``model-verify``: ``Verified``), a removal (``model-rm``: ``Removed``). The node writes
``to_dict()``; the controller reads each node's answer back with the parser, so one node's
malformed answer is that node's error and never the others'.

Standard library only, Python 3.9. A malformed answer is one ``ModelError``, one line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from halo_cluster.errors import ModelError
from halo_cluster.jsonout import JsonObject
from halo_cluster.modelstore import fields
from halo_cluster.modelstore.rpc_cache import CacheUse, parse_cache_use


# -- model-list -------------------------------------------------------------------------------
@dataclass(frozen=True)
class StoredModel:
    """A model in a node's store, as its manifest says (nothing hashed): complete or not;
    ``changed``: the files whose size, mtime or inode moved since they were verified."""

    name: str
    path: str
    complete: bool
    digest: str | None = None
    size: int | None = None
    files: int | None = None
    source: str | None = None
    entry: str | None = None
    changed: tuple[str, ...] | None = None

    def to_dict(self) -> JsonObject:
        return {
            "name": self.name, "complete": self.complete, "digest": self.digest,
            "size": self.size, "files": self.files, "source": self.source,
            "entry": self.entry, "path": self.path,
            "changed": None if self.changed is None else list(self.changed),
        }  # fmt: skip


def _stored(value: Any, where: str) -> StoredModel:
    data = fields.obj(value, where)
    name = fields.text(data.get("name"), f"{where} name")
    where = f"{where} {name}"
    changed = data.get("changed")
    return StoredModel(
        name,
        fields.text(data.get("path"), f"{where} path"),
        bool(data.get("complete")),
        fields.maybe_text(data.get("digest"), f"{where} digest"),
        fields.maybe_whole(data.get("size"), f"{where} size"),
        fields.maybe_whole(data.get("files"), f"{where} files"),
        fields.maybe_text(data.get("source"), f"{where} source"),
        fields.maybe_text(data.get("entry"), f"{where} entry"),
        None
        if changed is None
        else tuple(fields.text(c, f"{where} changed") for c in fields.items(changed, where)),
    )


@dataclass(frozen=True)
class Listing:
    store: str
    models: tuple[StoredModel, ...]
    rpc_cache: CacheUse | None = None  # llama.cpp's RPC tensor cache in the store

    def to_dict(self) -> JsonObject:
        return {
            "store": self.store,
            "models": [m.to_dict() for m in self.models],
            "rpc_cache": None if self.rpc_cache is None else self.rpc_cache.to_dict(),
        }


def parse_listing(value: Any) -> Listing:
    """A node's ``model-list`` answer (parsed JSON)."""
    data = fields.obj(value, "model-list")
    models = fields.items(data.get("models", []), "model-list models")
    cache = data.get("rpc_cache")
    return Listing(
        fields.text(data.get("store", ""), "model-list store"),
        tuple(_stored(m, "model-list model") for m in models),
        None if cache is None else parse_cache_use(cache, "model-list rpc_cache"),
    )


# -- model-verify ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Differs:
    path: str
    reason: str

    def to_dict(self) -> JsonObject:
        return {"path": self.path, "reason": self.reason}


@dataclass(frozen=True)
class Verified:
    """Every file of a model read again: those that differ from its manifest."""

    name: str
    digest: str
    files: int
    differ: tuple[Differs, ...]

    def to_dict(self) -> JsonObject:
        return {"name": self.name, "digest": self.digest, "files": self.files,
                "differ": [d.to_dict() for d in self.differ]}  # fmt: skip


def parse_verified(value: Any) -> Verified:
    """A node's ``model-verify`` answer (parsed JSON)."""
    data = fields.obj(value, "model-verify")
    differ = []
    for item in fields.items(data.get("differ", []), "model-verify differ"):
        found = fields.obj(item, "model-verify differ")
        path = fields.text(found.get("path"), "model-verify differ path")
        differ.append(Differs(path, fields.text(found.get("reason"), "model-verify reason")))
    return Verified(
        fields.text(data.get("name"), "model-verify name"),
        fields.text(data.get("digest"), "model-verify digest"),
        fields.whole(data.get("files"), "model-verify files"),
        tuple(differ),
    )


# -- model-rm ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Removed:
    name: str
    removed: bool  # False: there was nothing of that name

    def to_dict(self) -> JsonObject:
        return {"name": self.name, "removed": self.removed}


def parse_removed(value: Any) -> Removed:
    """A node's ``model-rm`` answer (parsed JSON)."""
    data = fields.obj(value, "model-rm")
    removed = data.get("removed")
    if not isinstance(removed, bool):
        raise ModelError("model-rm removed: not true or false")
    return Removed(fields.text(data.get("name"), "model-rm name"), removed)
