"""llama.cpp's RPC tensor cache on a node: ``STORE/.rpc-cache``, where a worker's
``rpc-server -c`` keeps the big tensors it was sent, so that the next load of the same model
takes them from the node's disk instead of the fabric. rpc-server itself never removes one,
so halo keeps it under a quota (``[serve.llama_cpp] cache_gib``): before a serve starts its
workers, the files used longest ago (their last read or write, whichever is later) go until
the cache holds at most the quota. A quota of 0 empties it (and the workers run without it).

Never outside the cache: a link in it is neither followed nor counted (removed, as a link,
only when the cache is emptied), and a link or a file where the cache's directory should be
is refused. Standard library only, Python 3.9 (nodes run it)."""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from typing import Any

from halo_cluster.errors import ModelError
from halo_cluster.jsonout import JsonObject
from halo_cluster.modelstore import fields
from halo_cluster.modelstore.manifest import regular_files

CACHE_DIR = ".rpc-cache"


def cache_path(store: str) -> str:
    """Where the workers' rpc-server keeps its tensors: beside the node's models."""
    return os.path.join(os.path.abspath(os.path.expanduser(store)), CACHE_DIR)


@dataclass(frozen=True)
class CacheUse:
    """What the cache holds after a trim (or a look), what the trim removed, its quota."""

    files: int = 0
    bytes: int = 0
    removed_files: int = 0
    removed_bytes: int = 0
    quota_bytes: int | None = None  # None: only looked at

    def to_dict(self) -> JsonObject:
        return {
            "files": self.files,
            "bytes": self.bytes,
            "removed_files": self.removed_files,
            "removed_bytes": self.removed_bytes,
            "quota_bytes": self.quota_bytes,
        }


def parse_cache_use(value: Any, where: str = "rpc-cache") -> CacheUse:
    data = fields.obj(value, where)
    return CacheUse(
        fields.whole(data.get("files"), f"{where} files", 0),
        fields.whole(data.get("bytes"), f"{where} bytes", 0),
        fields.whole(data.get("removed_files"), f"{where} removed_files", 0),
        fields.whole(data.get("removed_bytes"), f"{where} removed_bytes", 0),
        fields.maybe_whole(data.get("quota_bytes"), f"{where} quota_bytes"),
    )


def look(store: str) -> CacheUse:
    """What the cache holds now."""
    entries = _entries(cache_path(store))
    return CacheUse(len(entries), sum(size for _used, size, _path in entries))


def trim(store: str, quota_bytes: int) -> CacheUse:
    """The files used longest ago removed until the cache holds at most ``quota_bytes``."""
    if quota_bytes < 0:
        raise ModelError(f"a cache quota of {quota_bytes} B: give 0 or more")
    top = cache_path(store)
    entries = sorted(_entries(top))  # oldest use first
    held = sum(size for _used, size, _path in entries)
    removed_files = removed_bytes = 0
    for _used, size, path in entries:
        if held <= quota_bytes:
            break
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass  # gone meanwhile (rpc-server is not running while halo trims)
        except OSError as err:
            raise ModelError(f"{path}: cannot remove it ({err.strerror or err})") from None
        held -= size
        removed_files += 1
        removed_bytes += size
    if quota_bytes == 0:  # emptied: a link in it goes too (as a link, never followed)
        for link in _links(top):
            with contextlib.suppress(OSError):
                os.unlink(link)
    kept = len(entries) - removed_files
    return CacheUse(kept, held, removed_files, removed_bytes, quota_bytes)


def _entries(top: str) -> list[tuple[float, int, str]]:
    """(last use, size, path) of every regular file under ``top`` (none when it is not there)."""
    try:
        info = os.lstat(top)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise ModelError(f"{top}: {err.strerror or err}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise ModelError(f"{top}: not a directory (a link or a file): halo never follows it")
    return [(max(i.st_atime, i.st_mtime), i.st_size, path) for path, i in regular_files(top)]


def _links(top: str) -> list[str]:
    found = []
    for folder, dirs, files in os.walk(top, followlinks=False):
        for name in [*files, *dirs]:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                found.append(path)
    return found
