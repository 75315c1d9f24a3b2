"""Where a model comes from for ``halo model sync``: a path on this machine (a directory, a
GGUF file, a split GGUF's first shard), ``NODE:PATH`` on a node, a model in the local
Hugging Face cache, or a Hugging Face repo id downloaded where the hub is reachable. Each is
hashed once into a manifest (``modelstore``)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from halo_cluster.cluster.handle import Cluster
from halo_cluster.config.model import cache_dir
from halo_cluster.errors import ModelError
from halo_cluster.modelstore.manifest import (
    HashCache,
    Manifest,
    default_name,
    make_manifest,
    prefix_sha256,
    source_files,
    storable,
)
from halo_cluster.modelstore.transfer import HashAnswer, parse_hash_answer
from halo_cluster.wire.commands import MODEL_HASH

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
HASH_TIMEOUT_S = 6 * 3600.0


@dataclass(frozen=True)
class Source:
    label: str  # for people, and the manifest's ``source``
    node: str | None  # the node holding it; None: this machine
    path: str  # where it is on that machine
    files: dict[str, str]  # relative path -> the real path where it is read
    manifest: Manifest
    left_out: tuple[str, ...] = ()  # files of the source no engine reads (hidden ones)

    def prefixes(self, cluster: Cluster, asked: dict[str, set[int]]) -> dict[str, dict[int, str]]:
        """sha256 of the first N bytes of source files (partials left on nodes, checked
        before they are resumed): {rel: {N: sha256}}."""
        if not asked:
            return {}
        if self.node is None:
            return {
                rel: {n: prefix_sha256(self.files[rel], n) for n in sizes}
                for rel, sizes in asked.items()
            }
        flat = [f"{rel}:{n}" for rel, sizes in sorted(asked.items()) for n in sorted(sizes)]
        return _hash_on_node(cluster, self.node, self.path, self.manifest.name, flat).prefixes


def resolve_source(
    cluster: Cluster, text: str, name: str | None, progress: Callable[[int], None] | None = None
) -> Source:
    """The model ``text`` names, hashed: ``NODE:PATH`` on a node, else a path here, else a
    Hugging Face model (the local cache first, then the hub)."""
    node, colon, rest = text.partition(":")
    known = {n.name for n in cluster.config.nodes}
    if colon and node in known and rest:
        answer = _hash_on_node(cluster, node, rest, name or "", [])
        label = f"{node}:{answer.manifest.source}"
        return Source(label, node, rest, answer.files, _relabel(answer.manifest, label))
    if os.path.exists(text):
        return _local(text, os.path.abspath(text), name, progress)
    if REPO_ID.match(text.split("@", 1)[0]):
        return _hugging_face(text, name, progress)
    hint = f" ({node} is not a node of {cluster.config.path})" if colon and node else ""
    raise ModelError(
        f"{text}: no such file or directory here{hint}; give a path, NODE:PATH or a "
        "Hugging Face repo id (org/name)"
    )


def expected_name(cluster: Cluster, text: str) -> str | None:
    """The name a source at a path (here or ``NODE:PATH``) gets without ``--name``, known
    before it is hashed; None for anything else (a Hugging Face id is named from its files)."""
    node, colon, rest = text.partition(":")
    path = rest if colon and node in {n.name for n in cluster.config.nodes} and rest else text
    if path is text and not os.path.exists(text):
        return None
    try:
        return default_name(path)
    except ModelError:
        return None


def _relabel(manifest: Manifest, source: str) -> Manifest:
    return Manifest(manifest.name, manifest.files, manifest.entry, source)


def _hash_on_node(
    cluster: Cluster, node: str, path: str, name: str, prefixes: list[str]
) -> HashAnswer:
    client = cluster.client(node)
    argv = MODEL_HASH.argv(
        store=cluster.config.models.dir, name=name or None, prefix=prefixes, path=path
    )
    answer = client.call_json(*argv, timeout=HASH_TIMEOUT_S)
    try:
        return parse_hash_answer(answer)
    except ModelError as err:
        raise ModelError(f"{node}: {err}") from None


def local_cache() -> HashCache:
    return HashCache(str(cache_dir() / "model-hashes.json"))


def _local(
    path: str, label: str, name: str | None, progress: Callable[[int], None] | None
) -> Source:
    files, entry = source_files(path)
    manifest = make_manifest(
        name or default_name(path), files, entry, label, local_cache(), progress
    )
    return Source(label, None, path, dict(files), manifest)


def _hugging_face(text: str, name: str | None, progress: Callable[[int], None] | None) -> Source:
    """A repo id (``org/name``, ``org/name@revision``): its snapshot in the local Hugging
    Face cache, read through huggingface_hub's cache API; when it is not there, downloaded
    (where the hub can be reached)."""
    repo_id, _, revision = text.partition("@")
    try:
        import huggingface_hub
    except ImportError:
        raise ModelError(
            f"{text}: reading the Hugging Face cache needs huggingface_hub "
            "(pip install huggingface_hub), or give the model's directory"
        ) from None
    found = _in_cache(huggingface_hub, repo_id, revision or None)
    if found is None:
        try:
            huggingface_hub.snapshot_download(repo_id, revision=revision or None)
        except Exception as err:  # the hub's errors have no common base but Exception
            reason = " ".join(str(err).split())[:160]
            raise ModelError(
                f"{repo_id}: not in the local Hugging Face cache and not downloadable here "
                f"({type(err).__name__}: {reason}); download it where the hub is reachable "
                f"('hf download {repo_id}') or give the model's directory"
            ) from None
        found = _in_cache(huggingface_hub, repo_id, revision or None)
        if found is None:
            raise ModelError(f"{repo_id}: downloaded, but not found in the cache afterwards")
    snapshot, every = found
    files, left_out = storable(every)  # .gitattributes, nearly everywhere: never an engine's
    if not files:
        raise ModelError(f"{repo_id}: its snapshot {snapshot} holds no file an engine reads")
    label = f"hf:{repo_id}@{snapshot.name}"
    entry = _gguf_entry([rel for rel, _ in files])
    manifest = make_manifest(
        name or default_name(repo_id.split("/")[-1]), files, entry, label, local_cache(), progress
    )
    return Source(label, None, str(snapshot), dict(files), manifest, tuple(left_out))


def _gguf_entry(paths: list[str]) -> str:
    """What llama.cpp opens in a repo of GGUF files: the one model's file (its first shard
    when split); '' when the repo holds several models or none (vLLM reads the directory)."""
    ggufs = sorted(p for p in paths if p.endswith(".gguf"))
    stems = {default_name(p) for p in ggufs}
    return ggufs[0] if len(stems) == 1 else ""


def _in_cache(
    hub: object, repo_id: str, revision: str | None
) -> tuple[Path, list[tuple[str, str]]] | None:
    """(snapshot directory, [(relative path, blob path)]) of the repo's revision (the one
    ``main`` points to, else the newest) in the cache; None when it is not cached."""
    try:
        info = hub.scan_cache_dir()  # type: ignore[attr-defined]
    except Exception:  # no cache directory yet, or one it cannot read
        return None
    for repo in info.repos:
        if repo.repo_id != repo_id or repo.repo_type != "model":
            continue
        revisions = sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True)
        chosen = None
        for candidate in revisions:
            if (revision is None and "main" in candidate.refs) or (
                revision is not None
                and (revision in candidate.refs or candidate.commit_hash.startswith(revision))
            ):
                chosen = candidate
            if chosen is not None:
                break
        if chosen is None and revision is None and revisions:
            chosen = revisions[0]
        if chosen is None:
            return None
        files = sorted(
            (
                str(Path(f.file_path).relative_to(chosen.snapshot_path)).replace(os.sep, "/"),
                str(f.blob_path),
            )
            for f in chosen.files
        )
        return Path(chosen.snapshot_path), files
    return None
