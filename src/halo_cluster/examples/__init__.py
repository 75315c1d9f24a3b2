"""Example data shipped with halo: filesystem roots of real-looking nodes, sample logs."""

from __future__ import annotations

from pathlib import Path

from halo_cluster.errors import UsageError

EXAMPLES = Path(__file__).resolve().parent


def example_root(name: str) -> Path:
    path = EXAMPLES / "roots" / name
    if not path.is_dir():
        raise UsageError(f"no bundled example root named {name!r}")
    return path


def example_log(name: str) -> str:
    path = EXAMPLES / "logs" / name
    if not path.is_file():
        raise UsageError(f"no bundled example log named {name!r}")
    return path.read_text(encoding="utf-8")
