"""Example data shipped with halo: filesystem roots of real-looking nodes, sample logs.

The roots travel as ``roots.tar.gz`` (symlinks kept; sysfs symlink cycles would make
packaging tools walk a plain directory forever) and are unpacked once per process into
a temporary directory that is removed at exit.
"""

from __future__ import annotations

import atexit
import shutil
import tarfile
import tempfile
from pathlib import Path

from halo_cluster.errors import UsageError

EXAMPLES = Path(__file__).resolve().parent
_unpacked: list[Path] = []


def example_root(name: str) -> Path:
    path = _unpack() / name
    if not path.is_dir():
        raise UsageError(f"no bundled example root named {name!r}")
    return path


def _unpack() -> Path:
    if not _unpacked:
        target = Path(tempfile.mkdtemp(prefix="halo-examples-"))
        atexit.register(shutil.rmtree, target, ignore_errors=True)
        with tarfile.open(EXAMPLES / "roots.tar.gz") as tar:
            _safe_extract(tar, target)
        _unpacked.append(target)
    return _unpacked[0]


def example_log(name: str) -> str:
    path = EXAMPLES / "logs" / name
    if not path.is_file():
        raise UsageError(f"no bundled example log named {name!r}")
    return path.read_text(encoding="utf-8")


def _safe_extract(tar: tarfile.TarFile, target: Path) -> None:
    """Extract with the 'data' filter where Python has it (3.11.4+); before that, refuse any
    member or link that would land outside ``target`` (our own archive, but still)."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(target, filter="data")
        return
    root = target.resolve()
    for member in tar.getmembers():
        dest = (root / member.name).resolve()
        if member.issym():
            link = (dest.parent / member.linkname).resolve()
            if root not in link.parents and link != root:
                raise UsageError(f"bundled example archive: link {member.name} leaves the root")
        if (root not in dest.parents and dest != root) or member.isdev():
            raise UsageError(f"bundled example archive: unsafe member {member.name}")
    tar.extractall(target)
