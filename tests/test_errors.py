"""The exception tree drawn in errors.py's docstring is the real one, every HaloError
subclass in the package is drawn, and the exit codes come from the one table."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import halo_cluster
from halo_cluster import errors
from halo_cluster.errors import (
    EXIT_CODES,
    BenchError,
    BenchInterrupted,
    HaloError,
    ListenError,
    NoTransportEvidence,
    SetupError,
    TransportError,
    UsageError,
    exit_code,
)

# modules that import heavy or optional packages at module level
_OPTIONAL = (
    "halo_cluster.monitor.tui",
    "halo_cluster.lab.tiny_gguf",
    "halo_cluster.lab.tiny_model",
)


def _all_modules() -> None:
    for info in pkgutil.walk_packages(halo_cluster.__path__, "halo_cluster."):
        if info.name.endswith("__main__"):
            continue  # runs the CLI
        try:
            importlib.import_module(info.name)
        except ImportError:
            if info.name not in _OPTIONAL:
                raise


def _drawn() -> dict[str, str]:
    """class -> parent, as the docstring draws it (indentation of the tree's branches)."""
    doc = errors.__doc__ or ""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in doc.splitlines():
        match = re.match(r"^(\s*(?:[│ ]   )*)(?:[├└]── )?([A-Z]\w+)\s{2,}", line)
        if not match or not ("──" in line or line.strip().startswith("HaloError")):
            continue
        depth, name = match.start(2), match.group(2)  # how far right the name stands
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[name] = stack[-1][1]
        stack.append((depth, name))
    return parents


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub} | _subclasses(sub)
    return found


def test_the_drawn_tree_is_the_real_hierarchy() -> None:
    _all_modules()
    drawn = _drawn()
    real = {
        c.__name__: c.__bases__[0].__name__
        for c in _subclasses(HaloError)
        if c.__module__.startswith("halo_cluster.")
    }
    assert drawn == real


def test_every_exception_class_lives_in_errors() -> None:
    _all_modules()
    elsewhere = {
        c.__name__: c.__module__
        for c in _subclasses(BaseException)
        if c.__module__.startswith("halo_cluster.") and c.__module__ != "halo_cluster.errors"
    }
    assert elsewhere == {}


@pytest.mark.parametrize(
    ("err", "code"),
    [
        (HaloError("x"), 1),
        (UsageError("x"), 2),
        (ListenError("x"), 2),
        (SetupError("x"), 1),  # a failed remote setup is not a usage error
        (BenchError("x"), 1),
        (TransportError("x"), 1),
        (NoTransportEvidence("x"), 3),
        (KeyboardInterrupt(), 130),
        (BenchInterrupted([]), 130),
        (ValueError("a bug"), 1),
    ],
)
def test_exit_codes_come_from_the_table(err: BaseException, code: int) -> None:
    assert exit_code(err) == code
    if isinstance(err, HaloError):
        assert err.exit_code == type(err).exit_code == code


def test_the_table_has_the_documented_codes() -> None:
    assert EXIT_CODES[UsageError] == 2 and EXIT_CODES[NoTransportEvidence] == 3
    assert EXIT_CODES[KeyboardInterrupt] == 130


def test_partial_rows_are_typed_attributes() -> None:
    assert BenchError("cut", [{"bytes": 8}]).partial == [{"bytes": 8}]
    assert BenchError("cut").partial == []
    interrupted = BenchInterrupted([1, 2])
    assert isinstance(interrupted, KeyboardInterrupt) and interrupted.partial == [1, 2]
