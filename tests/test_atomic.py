"""The one atomic write: all or nothing, final permissions, no temporary file left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from halo_cluster.atomic import AtomicFile, atomic_write


def test_atomic_write_replaces_with_the_mode_asked(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")
    atomic_write(path, "new", mode=0o644)
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["state.json"]


def test_without_a_mode_the_file_is_private(tmp_path: Path) -> None:
    atomic_write(tmp_path / "token", "secret\n", prefix=".token.")
    assert stat.S_IMODE((tmp_path / "token").stat().st_mode) == 0o600


def test_a_failed_write_keeps_the_old_content_and_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), AtomicFile(path) as handle:
        handle.write("half")
        raise RuntimeError("disk full")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["result.json"]


def test_creating_where_one_cannot_fails_at_construction(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        AtomicFile(tmp_path / "missing" / "file")
