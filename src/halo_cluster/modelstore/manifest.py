"""A model as a list of files: relative path, size, sha256 (the manifest), and the hashing
that makes one, once: a file's hash is kept beside its size, mtime and inode, so a second
look at 100 GB that did not change reads nothing.

Pure where it can be (``Manifest`` from and to dicts, ``relative_ok``); the rest reads files
it is given. Standard library only, Python 3.9: nodes run it (``node/handlers.py``) and so
does the controller (``models/sync.py``)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from halo_cluster.errors import ModelError
from halo_cluster.jsonout import JsonObject

SCHEMA = "halo.model/1"
CHUNK = 1 << 20
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_FILES = 100_000
SHA256 = re.compile(r"^[0-9a-f]{64}$")
# A split GGUF: NAME-00001-of-00003.gguf
_SHARD = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")
Progress = Callable[[int], None]  # bytes hashed since the last call


def check_name(name: str) -> str:
    """A model's name in the store: a directory name, never a path."""
    if not NAME.match(name) or name in (".", ".."):
        raise ModelError(
            f"model name {name!r}: use 1-128 letters, digits, '.', '_' or '-' "
            "(starting with a letter or digit)"
        )
    return name


def relative_ok(path: str) -> bool:
    """A manifest's relative path: no absolute path, no '..', no empty or hidden part
    (halo's own bookkeeping lives in '.halo'), no NUL or newline."""
    if not path or path.startswith("/") or len(path) > 4096:
        return False
    if any(c in path for c in "\x00\n\r\\"):
        return False
    return all(part not in ("", ".", "..") and not part.startswith(".") for part in path.split("/"))


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the model's directory, '/'-separated
    size: int
    sha256: str

    def to_dict(self) -> JsonObject:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class Manifest:
    name: str
    files: tuple[FileEntry, ...]
    entry: str = ""  # what an engine opens: '' (the directory) or a file (a GGUF's first shard)
    source: str = ""  # where it was synced from, for people (the command that repairs it)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def digest(self) -> str:
        """The content's identity: the same files with the same bytes, whatever the name."""
        text = json.dumps([[f.path, f.size, f.sha256] for f in self.files], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def by_path(self) -> dict[str, FileEntry]:
        return {f.path: f for f in self.files}

    def to_dict(self) -> JsonObject:
        return {
            "schema": SCHEMA,
            "name": self.name,
            "entry": self.entry,
            "source": self.source,
            "digest": self.digest,
            "size": self.size,
            "files": [f.to_dict() for f in self.files],
        }


def manifest_from(data: Any, where: str = "manifest") -> Manifest:
    """A manifest from its dict (a file in a store, a node's answer, the controller's spec);
    ModelError naming ``where`` and the field when it is not one."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ModelError(f"{where}: not a {SCHEMA} manifest")
    raw = data.get("files")
    if not isinstance(raw, list) or len(raw) > MAX_FILES:
        raise ModelError(f"{where}: 'files' must be a list of at most {MAX_FILES} entries")
    files = []
    seen = set()
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ModelError(f"{where}: files[{index}] is not an object")
        path, size, sha = item.get("path"), item.get("size"), item.get("sha256")
        if not isinstance(path, str) or not relative_ok(path) or path in seen:
            raise ModelError(f"{where}: files[{index}].path {str(path)[:80]!r} is not allowed")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size < 1 << 50:
            raise ModelError(f"{where}: files[{index}].size is not a size")
        if not isinstance(sha, str) or not SHA256.match(sha):
            raise ModelError(f"{where}: files[{index}].sha256 is not a sha256")
        seen.add(path)
        files.append(FileEntry(path, size, sha))
    name, entry, source = data.get("name"), data.get("entry", ""), data.get("source", "")
    if not isinstance(name, str):
        raise ModelError(f"{where}: 'name' is not a string")
    check_name(name)
    if not isinstance(entry, str) or (entry and entry not in seen):
        raise ModelError(f"{where}: 'entry' names no file of the manifest")
    if not isinstance(source, str):
        raise ModelError(f"{where}: 'source' is not a string")
    return Manifest(name, tuple(sorted(files, key=lambda f: f.path)), entry, source[:1024])


# -- what a source is made of ---------------------------------------------------------------
def source_files(path: str) -> tuple[list[tuple[str, str]], str]:
    """The files of a model at ``path`` on this machine: [(relative path, real path)] and the
    entry. A directory: every regular file under it (halo's '.halo' and hidden files left
    out); a link is followed only while it stays inside the directory. A GGUF file: itself,
    or every shard of a split model when it is one ('-00001-of-00003.gguf')."""
    try:
        info = os.stat(path)
    except OSError as err:
        raise ModelError(f"{path}: {err.strerror or err}") from None
    if stat.S_ISDIR(info.st_mode):
        return _directory_files(path), ""
    if not stat.S_ISREG(info.st_mode):
        raise ModelError(f"{path}: not a directory or a regular file")
    name = os.path.basename(path)
    shard = _SHARD.match(name)
    if shard is None:
        return [(name, os.path.realpath(path))], name
    count = int(shard.group("count"))
    if count < 1 or count > 9999:
        raise ModelError(f"{path}: a split GGUF of {count} shards?")
    folder = os.path.dirname(path) or "."
    stem = shard.group("stem")
    files = []
    for index in range(1, count + 1):
        part = f"{stem}-{index:05d}-of-{count:05d}.gguf"
        full = os.path.join(folder, part)
        if not os.path.isfile(full):
            raise ModelError(f"{path}: shard {part} of this split GGUF is missing")
        files.append((part, os.path.realpath(full)))
    return files, files[0][0]


def regular_files(top: str) -> Iterator[tuple[str, os.stat_result]]:
    """(path, lstat) of every regular file under ``top``, links neither followed nor given;
    a file gone while walked is passed over."""
    for folder, _dirs, names in os.walk(top, followlinks=False):
        for name in names:
            path = os.path.join(folder, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                yield path, info


def _directory_files(top: str) -> list[tuple[str, str]]:
    real_top = os.path.realpath(top)
    found: list[tuple[str, str]] = []
    for folder, dirs, names in os.walk(top, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for d in list(dirs):
            full = os.path.join(folder, d)
            if os.path.islink(full):
                raise ModelError(f"{full}: a linked directory; give the directory it points to")
        for name in sorted(names):
            if name.startswith("."):
                continue
            full = os.path.join(folder, name)
            rel = os.path.relpath(full, top).replace(os.sep, "/")
            real = os.path.realpath(full)
            if not (real + "/").startswith(real_top + "/") and real != real_top:
                raise ModelError(f"{full}: links out of {top} (to {real}); copy the file in")
            if not os.path.isfile(real):
                raise ModelError(f"{full}: not a regular file")
            if not relative_ok(rel):
                raise ModelError(f"{full}: a name halo cannot store")
            found.append((rel, real))
            if len(found) > MAX_FILES:
                raise ModelError(f"{top}: more than {MAX_FILES} files; not a model")
    if not found:
        raise ModelError(f"{top}: no files")
    return found


def storable(files: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[str]]:
    """``files`` split into those a store can hold and the relative paths left out: hidden
    files and folders (a Hugging Face snapshot's ``.gitattributes``: no engine reads them)
    and names ``relative_ok`` refuses. A node refuses a manifest that names one."""
    kept = [(rel, real) for rel, real in files if relative_ok(rel)]
    return kept, sorted(rel for rel, _real in files if not relative_ok(rel))


# -- hashing, once ---------------------------------------------------------------------------
class HashCache:
    """sha256 of files, kept by (size, mtime_ns, inode) in one JSON file: a file whose stat
    did not change is not read again. Unreadable or foreign cache files are started afresh."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.entries: dict[str, list[Any]] = {}
        self.dirty = False
        if path is None:
            return
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.loads(handle.read(64 << 20))
        except (OSError, ValueError, RecursionError):
            return
        if isinstance(data, dict):
            self.entries = {
                k: v
                for k, v in data.items()
                if isinstance(k, str) and isinstance(v, list) and len(v) == 4
            }

    @staticmethod
    def key(info: os.stat_result) -> list[Any]:
        return [info.st_size, info.st_mtime_ns, info.st_ino]

    def known(self, path: str, info: os.stat_result) -> str | None:
        entry = self.entries.get(path)
        if entry is not None and entry[:3] == self.key(info) and isinstance(entry[3], str):
            return entry[3]
        return None

    def remember(self, path: str, info: os.stat_result, sha: str) -> None:
        self.entries[path] = [*self.key(info), sha]
        self.dirty = True

    def forget(self, path: str) -> None:
        if self.entries.pop(path, None) is not None:
            self.dirty = True

    def hash(self, path: str, progress: Progress | None = None) -> tuple[int, str]:
        """(size, sha256) of ``path``: from the cache when its stat is unchanged, else read
        (and a file that changes while it is read is an error, not a hash)."""
        before = _stat_regular(path)
        cached = self.known(path, before)
        if cached is not None:
            if progress:
                progress(before.st_size)
            return before.st_size, cached
        digest = hashlib.sha256()
        for chunk in read_chunks(path, 0, before.st_size):
            digest.update(chunk)
            if progress:
                progress(len(chunk))
        after = _stat_regular(path)
        if self.key(after) != self.key(before):
            raise ModelError(f"{path}: changed while being hashed; sync it when it is written")
        sha = digest.hexdigest()
        self.remember(path, after, sha)
        return after.st_size, sha

    def save(self) -> None:
        if self.path is None or not self.dirty:
            return
        folder = os.path.dirname(self.path) or "."
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(self.entries, handle)
            os.replace(tmp, self.path)
            self.dirty = False
        except OSError:  # a cache that cannot be written only costs a re-hash next time
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _stat_regular(path: str) -> os.stat_result:
    try:
        info = os.stat(path)
    except OSError as err:
        raise ModelError(f"{path}: {err.strerror or err}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ModelError(f"{path}: not a regular file")
    return info


def open_regular(path: str) -> int:
    """A descriptor of ``path`` for reading; ModelError unless it is a regular file (opened
    without blocking: a FIFO put in a file's place is refused, not waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise ModelError(f"{path}: {err.strerror or err}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ModelError(f"{path}: not a regular file")
    return fd


def read_chunks(path: str, start: int, end: int) -> Iterator[bytes]:
    """Bytes ``start`` to ``end`` of a regular file, in chunks (never more than asked)."""
    with os.fdopen(open_regular(path), "rb") as handle:
        handle.seek(start)
        left = end - start
        while left > 0:
            chunk = handle.read(min(CHUNK, left))
            if not chunk:
                raise ModelError(f"{path}: shorter than {end} bytes (changed while read?)")
            left -= len(chunk)
            yield chunk


def prefix_sha256(path: str, size: int) -> str:
    """sha256 of the first ``size`` bytes of ``path`` (a partial file's verified prefix)."""
    digest = hashlib.sha256()
    for chunk in read_chunks(path, 0, size):
        digest.update(chunk)
    return digest.hexdigest()


def make_manifest(
    name: str,
    files: list[tuple[str, str]],
    entry: str,
    source: str,
    cache: HashCache,
    progress: Progress | None = None,
) -> Manifest:
    """Hash ``files`` ([(relative, real path)]) into a manifest, through ``cache``; a path a
    store cannot hold (see ``storable``) is one ModelError here, never a manifest that every
    node refuses."""
    for rel, _real in files:
        if not relative_ok(rel):
            raise ModelError(f"{rel[:80]!r}: a name halo cannot store (hidden, or not a path)")
    entries = []
    for rel, real in files:
        size, sha = cache.hash(real, progress)
        entries.append(FileEntry(rel, size, sha))
    cache.save()
    return Manifest(check_name(name), tuple(sorted(entries, key=lambda f: f.path)), entry, source)


def default_name(path: str) -> str:
    """A model's name from its source path: the directory's or the file's name, without
    '.gguf' and a split model's shard suffix, made a valid name."""
    base = os.path.basename(os.path.normpath(path))
    shard = _SHARD.match(base)
    if shard:
        base = shard.group("stem")
    elif base.endswith(".gguf"):
        base = base[: -len(".gguf")]
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip(".-_")[:128]
    return check_name(cleaned or "model")
