"""Python 3.9 is a rule for the node side, not a comment: ruff lints every file node/main.py
runs as py39 (pyproject.toml's per-file-target-version, kept equal to what it imports),
tools/node_py39.py flags what ruff and mypy cannot see, the zipapp packs all of it, and the
commands run on the real CPython 3.9 (tests/test_node_main.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from halo_cluster.nodecode import package_files

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import node_py39  # noqa: E402

RUFF = str(Path(sys.executable).parent / "ruff")


def test_ruff_lints_every_file_the_node_side_runs_as_python_3_9() -> None:
    files = node_py39.node_files()
    relative = {f.relative_to(REPO).as_posix() for f in files}
    assert {
        "src/halo_cluster/node/main.py",
        "src/halo_cluster/wire/answers.py",
        "src/halo_cluster/facts/inventory.py",
        "src/halo_cluster/monitor/run.py",
        "src/halo_cluster/setup/apply.py",
        "src/halo_cluster/bench/driver.py",
        "src/halo_cluster/bench/rank.py",
    } <= relative
    assert not {
        f for f in relative if f.startswith(("src/halo_cluster/cli/", "src/halo_cluster/cluster/"))
    }
    assert node_py39.uncovered(files, node_py39.py39_patterns()) == []


def test_the_node_side_uses_nothing_python_3_9_lacks() -> None:
    assert node_py39.problems() == []


def test_the_zipapp_packs_what_the_node_side_runs_and_nothing_else() -> None:
    """The zipapp's files are the node side's, as import-linter's graph (grimp) finds them
    too: the list halo reads from its own sources misses no import."""
    import grimp

    packed = {name for name, _data in package_files()}
    wanted = {f.relative_to(REPO / "src").as_posix() for f in node_py39.node_files()}
    assert packed == wanted
    graph = grimp.build_graph("halo_cluster", exclude_type_checking_imports=True, cache_dir=None)
    todo, seen = ["halo_cluster.node.main"], set()
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            parts = module.split(".")
            todo += [".".join(parts[:i]) for i in range(1, len(parts))]
            todo += graph.find_modules_directly_imported_by(module)
    assert node_py39.node_modules() == seen


SCRATCH = """\
from __future__ import annotations

import itertools
import socket
from dataclasses import dataclass, field
from typing import Optional, Self

import tomllib

Alias = int | None
Fine = Optional[int]


@dataclass(frozen=True, slots=True)
class A:
    x: int | None = field(default=None, kw_only=True)

    def f(self, y: str | None) -> list[int] | None:
        if isinstance(y, int | str) or isinstance(y, (int, str)):
            pass
        for _a, _b in zip([1], [2], strict=True):
            pass
        try:
            pass
        except TimeoutError:
            pass
        try:
            pass
        except (TimeoutError, socket.timeout):
            pass
        flags = 1 | 2
        return list(itertools.pairwise([flags, 2]))


def lazily() -> object:
    import tomllib  # where a file is read: never on a node

    return tomllib
"""


def test_the_check_flags_what_python_3_9_lacks_and_nothing_else() -> None:
    assert node_py39.findings(SCRATCH, "x.py") == [
        "x.py:6: typing.Self is not in Python 3.9",
        "x.py:8: module tomllib is not in Python 3.9",
        "x.py:10: X | None evaluated at run time is Python 3.10: Optional[X]",
        "x.py:14: dataclass(slots=...) is Python 3.10",
        "x.py:16: field(kw_only=...) is Python 3.10",
        "x.py:19: isinstance() with A | B is Python 3.10: a tuple (A, B)",
        "x.py:21: zip(strict=...) is Python 3.10",
        "x.py:25: except TimeoutError misses socket.timeout before Python 3.10: name it too",
        "x.py:32: itertools.pairwise is not in Python 3.9",
    ]


def _ruff(tmp: Path, where: str, source: str) -> str:
    path = tmp / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    done = subprocess.run(
        [RUFF, "check", "--no-cache", "--output-format", "concise", where],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout


def test_ruff_reads_the_table(tmp_path: Path) -> None:
    """The same file: py39 rules under node/, py311 rules in the controller's packages."""
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    source = (
        "import socket\n\n\ndef f(s: socket.socket) -> None:\n"
        "    try:\n        s.accept()\n    except socket.timeout:\n        return\n"
        "    match s:\n        case _:\n            pass\n"
    )
    node = _ruff(tmp_path, "src/halo_cluster/node/x.py", source)
    controller = _ruff(tmp_path, "src/halo_cluster/cluster/x.py", source)
    assert "Cannot use `match` statement on Python 3.9" in node and "UP041" not in node
    assert "UP041" in controller and "match" not in controller
