"""A node's model store, on its own disk:

    STORE/NAME/…                        the model's files, as an engine opens them
    STORE/NAME/.halo/manifest.json      written last: the model is complete only with it
    STORE/NAME/.halo/partial/…          files being received (never where an engine looks)
    STORE/.halo-hashes.json             sha256 by (size, mtime, inode): nothing re-hashed twice

A file is received as a partial, checked against its sha256, then renamed into place; the
manifest goes in only when every file of it is there and verified, and goes out before any
file of the model changes.

The store never reaches outside itself: a link where a model's directory, its ``.halo`` or a
directory on the way to a file should be is never followed (it would delete, hash or write
files of its target). Reading says so in one line (``list`` shows such a model incomplete);
writing refuses it. A link in place of a file is only ever removed or replaced, as a link.
Standard library only, Python 3.9 (nodes run it)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
from typing import Any

from halo_cluster.errors import ModelError
from halo_cluster.modelstore.answers import Differs, StoredModel, Verified
from halo_cluster.modelstore.manifest import (
    HashCache,
    Manifest,
    check_name,
    manifest_from,
    prefix_sha256,
    read_chunks,
    regular_files,
    relative_ok,
)
from halo_cluster.modelstore.transfer import Held, ModelState

META = ".halo"
HASHES = ".halo-hashes.json"
MAX_MANIFEST = 32 << 20


class Store:
    def __init__(self, root: str) -> None:
        if not root or "\x00" in root:
            raise ModelError(f"model store {root!r}: not a path")
        self.root = os.path.abspath(os.path.expanduser(root))
        self.cache = HashCache(os.path.join(self.root, HASHES))

    # -- where ------------------------------------------------------------------------------
    def model_dir(self, name: str) -> str:
        return os.path.join(self.root, check_name(name))

    def final(self, name: str, rel: str) -> str:
        if not relative_ok(rel):
            raise ModelError(f"{rel!r}: not a path inside a model")
        return os.path.join(self.model_dir(name), *rel.split("/"))

    def partial(self, name: str, rel: str) -> str:
        if not relative_ok(rel):
            raise ModelError(f"{rel!r}: not a path inside a model")
        return os.path.join(self.model_dir(name), META, "partial", *rel.split("/"))

    def marker(self, name: str) -> str:
        return os.path.join(self.model_dir(name), META, "manifest.json")

    def linked(self, name: str, rel: str = "") -> str | None:
        """The first path from the model's directory down to ``rel``'s folder (``rel`` a
        '/'-separated path inside the model) that is a link or not a directory; None when
        every one that exists is a real directory. Nothing is followed."""
        where = self.model_dir(name)
        parts = [p for p in rel.split("/") if p]
        for part in [None, *parts]:
            if part is not None:
                where = os.path.join(where, part)
            try:
                info = os.lstat(where)
            except FileNotFoundError:
                return None
            except OSError:
                return where
            if not stat.S_ISDIR(info.st_mode):
                return where
        return None

    def check(self, name: str, rel: str = "") -> None:
        """ModelError, one line, when ``linked`` finds a link or a file on the way."""
        found = self.linked(name, rel)
        if found is not None:
            raise ModelError(_not_halos(found))

    def make_dirs(self, name: str, rel: str) -> None:
        """The directories of ``rel`` (inside the model) made one at a time, never through
        a link (a link or a file on the way is ModelError)."""
        where = self.model_dir(name)
        for part in ["", *[p for p in rel.split("/") if p]]:
            where = os.path.join(where, part) if part else where
            with contextlib.suppress(FileExistsError):
                os.mkdir(where, 0o755)
            if not stat.S_ISDIR(os.lstat(where).st_mode):
                raise ModelError(_not_halos(where))

    def ensure(self) -> None:
        """The store's directory, made when missing; one line when it cannot be."""
        try:
            os.makedirs(self.root, mode=0o755, exist_ok=True)
        except OSError as err:
            raise ModelError(
                f"model store {self.root}: {err.strerror or err} (set [models] dir in halo.toml "
                "to a directory this user can write)"
            ) from None

    # -- reading ----------------------------------------------------------------------------
    def manifest(self, name: str) -> Manifest | None:
        """The model's manifest when it is complete; None when it is not (or not there)."""
        path = self.marker(name)
        if self.linked(name, META) is not None:
            return None  # never read through a link: the store's word is its own
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a directory opens too, then cannot be read
            os.close(fd)
            return None
        with os.fdopen(fd, "rb") as handle:
            try:
                raw = handle.read(MAX_MANIFEST + 1)
            except OSError:
                return None
        try:
            return manifest_from(json.loads(raw.decode("utf-8")), path)
        except (ValueError, RecursionError, ModelError):
            return None

    def names(self) -> list[str]:
        try:
            entries = sorted(os.listdir(self.root))
        except OSError:
            return []
        return [
            n
            for n in entries
            if not n.startswith(".") and os.path.isdir(os.path.join(self.root, n))
        ]

    def present(self, name: str, hash_stale: bool = True) -> dict[str, dict[str, Any]]:
        """The model's files on this node: {rel: {size, sha256}}; sha256 None when the file
        changed since it was last hashed and ``hash_stale`` is False."""
        self.check(name)
        top = self.model_dir(name)
        found: dict[str, dict[str, Any]] = {}
        for folder, dirs, files in os.walk(top, followlinks=False):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for link in [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
                dirs.remove(link)  # os.walk lists a linked directory: a stray entry, not ours
                files.append(link)
            for fname in files:
                if fname.startswith("."):
                    continue
                full = os.path.join(folder, fname)
                rel = os.path.relpath(full, top).replace(os.sep, "/")
                try:
                    info = os.lstat(full)
                except OSError:
                    continue
                if not stat.S_ISREG(info.st_mode):
                    found[rel] = {"size": None, "sha256": None}
                    continue
                sha = self.cache.known(full, info)
                if sha is None and hash_stale:
                    sha = self.cache.hash(full)[1]
                found[rel] = {"size": info.st_size, "sha256": sha}
        self.cache.save()
        return found

    def partials(self, name: str) -> dict[str, dict[str, Any]]:
        """Files being received: {rel: {size, sha256 of that prefix}}."""
        self.check(name, f"{META}/partial")
        top = os.path.join(self.model_dir(name), META, "partial")
        found: dict[str, dict[str, Any]] = {}
        for full, info in regular_files(top):
            rel = os.path.relpath(full, top).replace(os.sep, "/")
            if info.st_size > 0 and relative_ok(rel):
                found[rel] = {"size": info.st_size, "sha256": prefix_sha256(full, info.st_size)}
        return found

    def state(self, name: str) -> ModelState:
        """What this node holds of ``name``: the manifest when complete, every file with its
        sha256, and the partials a sync can resume."""
        # an entry that is no regular file (a stray link: 'complete' removes it) holds nothing
        # of the model, and its None size is no answer the controller takes
        held = {
            rel: Held(f["size"], f["sha256"])
            for rel, f in self.present(name).items()
            if f["size"] is not None
        }
        partial = {rel: Held(f["size"], f["sha256"]) for rel, f in self.partials(name).items()}
        return ModelState(
            check_name(name), self.root, self.model_dir(name), self.manifest(name), held, partial
        )

    def listing(self) -> list[StoredModel]:
        """Every model in the store, without hashing anything: complete or not, its size."""
        out = []
        for name in self.names():
            manifest = self.manifest(name)
            path = self.model_dir(name)
            if manifest is None or self.linked(name) is not None:
                out.append(StoredModel(name, path, False))
                continue
            out.append(StoredModel(
                name, path, True, manifest.digest, manifest.size, len(manifest.files),
                manifest.source, manifest.entry, tuple(self._changed(name, manifest)),
            ))  # fmt: skip
        return out

    def _changed(self, name: str, manifest: Manifest) -> list[str]:
        """Files of a complete model that are gone or whose size, mtime or inode is not the
        one they were verified with (a stat each: nothing is read)."""
        changed = []
        for entry in manifest.files:
            full = self.final(name, entry.path)
            try:
                info = os.lstat(full)
            except OSError:
                changed.append(entry.path)
                continue
            folder = entry.path.rpartition("/")[0]
            odd = self.linked(name, folder) is not None or not stat.S_ISREG(info.st_mode)
            if odd or self.cache.known(full, info) != entry.sha256:
                changed.append(entry.path)
        return changed

    def verify(self, name: str) -> Verified:
        """Every file of the model read again (no cache): which differ from its manifest."""
        self.check(name)
        manifest = self.manifest(name)
        if manifest is None:
            where = self.model_dir(name)
            what = "is incomplete" if os.path.isdir(where) else "is not here"
            raise ModelError(f"model {name} {what} ({where}): sync it first")
        differ = []
        for entry in manifest.files:
            full = self.final(name, entry.path)
            self.cache.forget(full)
            odd = _odd(self, name, entry.path)
            if odd is not None:
                differ.append(Differs(entry.path, odd))
                continue
            try:
                size, sha = self.cache.hash(full)
            except ModelError as err:
                differ.append(Differs(entry.path, str(err).split(": ", 1)[-1]))
                continue
            if size != entry.size or sha != entry.sha256:
                differ.append(Differs(entry.path, f"sha256 {sha[:12]}…, {size} B"))
        self.cache.save()
        if differ:  # never served again as it is; the next sync sends only these files
            self.invalidate(name)
        return Verified(name, manifest.digest, len(manifest.files), tuple(differ))

    # -- changing ---------------------------------------------------------------------------
    def invalidate(self, name: str) -> None:
        """The model stops being complete (before any of its files changes); ModelError
        when its directory or its ``.halo`` is a link (nothing is done through it)."""
        self.check(name, META)
        try:
            os.unlink(self.marker(name))
        except FileNotFoundError:
            pass
        except OSError as err:
            raise ModelError(f"{self.marker(name)}: {err.strerror or err}") from None

    def complete(self, manifest: Manifest) -> None:
        """Mark ``manifest`` complete: files not in it removed, then the manifest written
        (fsynced, renamed into place) last."""
        name = manifest.name
        self.check(name, f"{META}/partial")
        wanted = {f.path for f in manifest.files}
        for rel in list(self.present(name, hash_stale=False)):
            if rel not in wanted:  # a link among them goes as a link: its target stays
                os.unlink(self.final(name, rel))
        shutil.rmtree(os.path.join(self.model_dir(name), META, "partial"), ignore_errors=True)
        path = self.marker(name)
        self.make_dirs(name, META)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(manifest.to_dict(), handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    def remove(self, name: str) -> bool:
        top = self.model_dir(name)
        if os.path.islink(top) or (os.path.exists(top) and not os.path.isdir(top)):
            raise ModelError(f"{top}: not a model directory halo made; remove it by hand")
        if not os.path.isdir(top):
            return False
        shutil.rmtree(top)
        prefix = top + os.sep
        for path in [p for p in self.cache.entries if p.startswith(prefix)]:
            self.cache.forget(path)
        self.cache.save()
        return True


class Receiving:
    """One file arriving: written as a partial from ``offset`` (the verified prefix a
    previous sync left), hashed as it comes, renamed into place only when its sha256 is the
    manifest's."""

    def __init__(self, store: Store, name: str, rel: str, size: int, sha: str, offset: int):
        self.store, self.name, self.rel = store, name, rel
        self.size, self.sha, self.offset = size, sha, offset
        self.path = store.partial(name, rel)
        self.digest = hashlib.sha256()
        store.make_dirs(name, f"{META}/partial/{rel.rpartition('/')[0]}")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        self.handle = os.fdopen(fd, "r+b")
        if offset:
            for chunk in read_chunks(self.path, 0, offset):
                self.digest.update(chunk)
        self.handle.truncate(offset)
        self.handle.seek(offset)
        self.written = offset

    def write(self, chunk: bytes | memoryview) -> None:
        """``chunk`` written and hashed."""
        self.put(chunk)
        self.digest.update(chunk)

    def put(self, chunk: bytes | memoryview) -> None:
        """``chunk`` written only: its hashing is the caller's (a thread of its own, in the
        same order)."""
        self.handle.write(chunk)
        self.written += len(chunk)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.handle.close()

    def finish(self) -> None:
        """Verified and in place, or ModelError: a partial cut short is kept (a later sync
        resumes it); one of full size whose sha256 is wrong is removed (it cannot be)."""
        try:
            self.handle.flush()
            os.fsync(self.handle.fileno())
            drop_cached(self.handle.fileno())
        finally:
            self.close()
        if self.written < self.size:  # cut short: what it holds stays, to resume from
            raise ModelError(f"{self.rel}: {self.written} of {self.size} B received")
        got = self.digest.hexdigest()
        if got != self.sha:
            os.unlink(self.path)
            raise ModelError(
                f"{self.rel}: received {self.written} B with sha256 {got[:12]}…, "
                f"not the source's {self.sha[:12]}…"
            )
        final = self.store.final(self.name, self.rel)
        self.store.make_dirs(self.name, self.rel.rpartition("/")[0])  # never through a link
        os.replace(self.path, final)  # a link in the file's place is replaced, not followed
        self.store.cache.remember(final, os.stat(final), got)


def drop_cached(fd: int) -> None:
    """The file's pages out of the page cache once they are on disk: on a node whose GPU
    shares the memory (unified memory), the cache a copied model leaves behind would take
    what the engine's load needs. Where the kernel cannot (tmpfs) it is a no-op."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        with contextlib.suppress(OSError):
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _not_halos(path: str) -> str:
    """The one line for a link (or a file) where the store keeps a directory."""
    try:
        what = f"a link to {os.readlink(path)}"
    except OSError:
        what = "not a directory"
    return (
        f"{path}: {what}, not a directory halo made; halo never follows it: remove it by hand "
        "(or sync under another --name)"
    )


def _odd(store: Store, name: str, rel: str) -> str | None:
    """Why a model's file is not a regular file of the store (None when it is one)."""
    folder = store.linked(name, rel.rpartition("/")[0])
    if folder is not None:
        return f"under {os.path.relpath(folder, store.model_dir(name))}, a link or not a directory"
    try:
        info = os.lstat(store.final(name, rel))
    except OSError:
        return None  # missing: the hash says so
    return None if stat.S_ISREG(info.st_mode) else "a link or not a regular file"
