"""A node's filesystem seen from a root directory (``/`` on the node, a fixture in tests).

This is the only place that opens files for facts. Paths are node paths relative to
the root, written without the leading slash (``"sys/class/net"``). Missing files are
absence (None / empty); unreadable or malformed ones become warnings.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import TypeVar

from halo_cluster.errors import ParseError, UsageError

T = TypeVar("T")

_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_ABSENT = (FileNotFoundError, NotADirectoryError)


class Root:
    """Reads files below ``path``; collects warnings for everything it could not use."""

    def __init__(self, path: str = "/") -> None:
        if not os.path.isdir(path):
            raise UsageError(f"root directory {path!r} does not exist or is not a directory")
        self.path = os.path.realpath(path)
        self.warnings: list[str] = []

    def host_path(self, rel: str) -> str:
        return os.path.join(self.path, rel)

    @staticmethod
    def shown(rel: str) -> str:
        """How a path is named in warnings: as the node sees it."""
        return "/" + rel

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def read(self, rel: str, *, quiet: bool = False) -> str | None:
        """The text of a file; None when missing. ``quiet``: an unreadable file is absence
        too (sysfs answers EINVAL for attributes that do not apply, e.g. empty GID slots)."""
        try:
            with open(self.host_path(rel), "rb") as handle:
                data = handle.read()
        except _ABSENT:
            return None
        except OSError as err:
            if not quiet:
                self.warn(f"{self.shown(rel)}: unreadable ({err.strerror or err})")
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
        return os.path.lexists(self.host_path(rel))

    def is_dir(self, rel: str) -> bool:
        return os.path.isdir(self.host_path(rel))

    def listdir(self, rel: str) -> list[str]:
        """Entry names, sorted naturally (``mlx5_2`` before ``mlx5_10``); [] when missing."""
        try:
            names = os.listdir(self.host_path(rel))
        except _ABSENT:
            return []
        except OSError as err:
            self.warn(f"{self.shown(rel)}: unreadable directory ({err.strerror or err})")
            return []
        return sorted(names, key=natural_key)

    def resolve(self, rel: str) -> str | None:
        """Follow symlinks; the target as a root-relative path, or None when missing.

        sysfs links are relative (``../../devices/pci0000:00/...``), so resolving them
        under the root keeps a fixture self-contained. A link leaving the root is a warning.
        """
        full = self.host_path(rel)
        if not os.path.lexists(full):
            return None
        target = os.path.realpath(full)
        if not self.contains(target):
            self.warn(f"{self.shown(rel)}: link points outside the root ({target})")
            return None
        if not os.path.exists(target):
            return None
        return os.path.relpath(target, self.path)

    def contains(self, host_path: str) -> bool:
        prefix = self.path.rstrip(os.sep) + os.sep
        return host_path == self.path or host_path.startswith(prefix)

    def link_name(self, rel: str) -> str | None:
        """The last component of a symlink's target (``device/driver`` -> ``mlx5_core``)."""
        try:
            return os.path.basename(os.readlink(self.host_path(rel)).rstrip("/")) or None
        except _ABSENT:
            return None
        except OSError:
            # Not a link (EINVAL) or unreadable: no driver bound.
            return None


def natural_key(name: str) -> list[tuple[int, int | str]]:
    """Sort key that orders embedded numbers numerically."""
    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name)]


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
