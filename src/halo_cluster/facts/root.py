"""A node's filesystem seen from a root directory (``/`` on the node, a fixture in tests).

This is the only place that opens files for facts. Paths are node paths relative to
the root, written without the leading slash (``"sys/class/net"``). Missing files are
absence (None / empty); unreadable or malformed ones become warnings.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from typing import TypeVar

from halo_cluster.errors import OutsideRoot, ParseError, UsageError

T = TypeVar("T")

_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_ABSENT = (FileNotFoundError, NotADirectoryError)
MAX_LINKS = 40  # as the kernel's path walk
MAX_READ = 1 << 20  # bytes per file
LARGE_READ = 16 << 20  # tables that grow with routes, connections or devices
LARGE_FILES = ("proc/net/", "proc/bus/pci/", "proc/interrupts")


class Root:
    """Reads files below ``path``; collects warnings for everything it could not use.

    The root is a jail: every symlink on the way to a file is resolved *inside* the root,
    as a process chrooted there would see it (an absolute target is re-rooted, a relative
    one that climbs above the root is a warning), so no file of the host outside the root
    is ever read, listed or tested. Only regular files are read (a FIFO, socket or device
    is a warning, never a hang), and every read is bounded.
    """

    def __init__(self, path: str = "/") -> None:
        if not os.path.isdir(path):
            raise UsageError(f"root directory {path!r} does not exist or is not a directory")
        self.path = os.path.realpath(path)
        self.warnings: list[str] = []

    def host_path(self, rel: str) -> str:
        """The host path of ``rel`` with its symlinks resolved inside the root (the path
        itself, joined, when it is missing or leaves the root: then nothing is there)."""
        try:
            found = self._walk(rel, follow_last=True)
        except OutsideRoot:
            found = None
        return found or os.path.join(self.path, rel)

    @staticmethod
    def shown(rel: str) -> str:
        """How a path is named in warnings: as the node sees it."""
        return "/" + rel

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def _walk(self, rel: str, follow_last: bool) -> str | None:
        """Host path of ``rel`` under the root, every symlink resolved inside the root;
        None when a component is missing. Raises OutsideRoot when a link climbs above it."""
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        done: list[str] = []
        links = 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                if not done:
                    raise OutsideRoot(rel)
                done.pop()
                continue
            here = os.path.join(self.path, *done, part)
            try:
                mode = os.lstat(here).st_mode
            except _ABSENT:
                return None
            except OSError:
                return None
            if stat.S_ISLNK(mode) and (parts or follow_last):
                links += 1
                if links > MAX_LINKS:
                    raise OutsideRoot(rel, "too many levels of symbolic links")
                target = os.readlink(here)
                if target.startswith("/"):
                    done = []  # an absolute target is re-rooted
                parts = [p for p in target.split("/") if p not in ("", ".")] + parts
                continue
            done.append(part)
        return os.path.join(self.path, *done)

    def _jailed(self, rel: str, follow_last: bool = True) -> str | None:
        try:
            return self._walk(rel, follow_last)
        except OutsideRoot as err:
            self.warn(f"{self.shown(rel)}: {err.reason}; not read")
            return None

    def read(self, rel: str, *, quiet: bool = False) -> str | None:
        """The text of a file; None when missing. ``quiet``: an unreadable file is absence
        too (sysfs answers EINVAL for attributes that do not apply, e.g. empty GID slots)."""
        host = self._jailed(rel)
        if host is None:
            return None
        limit = LARGE_READ if rel.startswith(LARGE_FILES) else MAX_READ
        try:
            fd = os.open(host, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except _ABSENT:
            return None
        except OSError as err:
            if not quiet:
                self.warn(f"{self.shown(rel)}: unreadable ({err.strerror or err})")
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                self.warn(f"{self.shown(rel)}: not a regular file; not read")
                return None
            data = _read_bounded(fd, limit + 1)
        except OSError as err:
            if not quiet:
                self.warn(f"{self.shown(rel)}: unreadable ({err.strerror or err})")
            return None
        finally:
            os.close(fd)
        if len(data) > limit:
            self.warn(f"{self.shown(rel)}: larger than {limit} bytes; not read")
            return None
        return data.decode("utf-8", errors="replace")

    def parse(self, rel: str, parser: Callable[[str], T], *, quiet: bool = False) -> T | None:
        """Read and parse one file; a parse failure becomes a warning and None."""
        text = self.read(rel, quiet=quiet)
        if text is None:
            return None
        try:
            return parser(text)
        except ParseError as err:
            self.warn(err.at(self.shown(rel)).describe())
            return None

    def exists(self, rel: str) -> bool:
        return self._jailed(rel, follow_last=False) is not None

    def is_dir(self, rel: str) -> bool:
        host = self._jailed(rel)
        return host is not None and os.path.isdir(host)

    def listdir(self, rel: str) -> list[str]:
        """Entry names, sorted naturally (``mlx5_2`` before ``mlx5_10``); [] when missing."""
        host = self._jailed(rel)
        if host is None:
            return []
        try:
            names = os.listdir(host)
        except _ABSENT:
            return []
        except OSError as err:
            self.warn(f"{self.shown(rel)}: unreadable directory ({err.strerror or err})")
            return []
        return sorted(names, key=natural_key)

    def resolve(self, rel: str) -> str | None:
        """Follow symlinks (inside the root); the target as a root-relative path, or None
        when missing. sysfs links are relative (``../../devices/pci0000:00/...``), so a
        fixture stays self-contained; a link climbing above the root is a warning."""
        host = self._jailed(rel)
        if host is None or not os.path.lexists(host):
            return None
        return os.path.relpath(host, self.path)

    def contains(self, host_path: str) -> bool:
        prefix = self.path.rstrip(os.sep) + os.sep
        return host_path == self.path or host_path.startswith(prefix)

    def link_name(self, rel: str) -> str | None:
        """The last component of a symlink's target (``device/driver`` -> ``mlx5_core``)."""
        host = self._jailed(rel, follow_last=False)
        if host is None:
            return None
        try:
            return os.path.basename(os.readlink(host).rstrip("/")) or None
        except OSError:
            # Not a link (EINVAL) or unreadable: no driver bound.
            return None


def _read_bounded(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def decoded_name(name: str) -> str:
    """A name from ``Root.listdir`` (an interface's) as the node's files write it: a listing
    holds the bytes that are not UTF-8 as surrogates, ``Root.read`` decodes text with U+FFFD
    for them; one form (U+FFFD) makes the two one name (/sys/class/net's and /proc/net/
    route's). Such a name is none NCCL or Gloo can be given: ``netnames.ifname_problem``."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def natural_key(name: str) -> list[tuple[int, int | str]]:
    """Sort key that orders embedded numbers numerically."""
    return [
        (0, int(part)) if part.isdigit() and len(part) < 20 else (1, part)
        for part in re.split(r"(\d+)", name)
    ]


def nearest_pci(rel_path: str | None) -> str | None:
    """The deepest PCI bus/device/function component of a sysfs device path."""
    if not rel_path:
        return None
    for part in reversed(rel_path.split("/")):
        if _BDF.match(part):
            return part
    return None


def is_bdf(text: str) -> bool:
    return bool(_BDF.match(text))
