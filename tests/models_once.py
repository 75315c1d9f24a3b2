"""The lab's tiny models, made once per test run by the real ``halo lab model`` and copied
into each test's own directory (a lab node sees its lab's directory, not the host's /tmp;
and a test may change its copy: cut a file short, swap its weights, move it away)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import halo

FORMATS = ("safetensors", "gguf", "both")


class TinyModels:
    """``copy(dest, format, seed)``: the model ``halo lab model DEST --format F [--seed S]``
    writes, made the first time it is asked for and copied from then on."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: dict[tuple[str, int | None], Path] = {}

    def source(self, format: str = "safetensors", seed: int | None = None) -> Path:
        if format not in FORMATS:
            raise ValueError(f"format {format!r}: one of {', '.join(FORMATS)}")
        key = (format, seed)
        if key not in self.made:
            out = self.root / f"{format}-{'default' if seed is None else seed}"
            extra = [] if seed is None else ["--seed", str(seed)]
            made = halo("lab", "model", str(out), "--format", format, *extra)
            assert made.returncode == 0, made.stderr
            self.made[key] = out
        return self.made[key]

    def copy(self, dest: Path, format: str = "safetensors", seed: int | None = None) -> Path:
        shutil.copytree(self.source(format, seed), dest)
        return dest


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    return TinyModels(tmp_path_factory.mktemp("tiny-models"))
