"""JSON from outside (a file someone named, a node's answer), parsed with bounds: what
``loads`` returns holds only finite numbers of a plausible size and nests at most
``MAX_DEPTH`` deep; anything else is one ValueError line.

``json.loads`` alone accepts ``NaN`` and ``Infinity``, turns ``1e400`` into infinity and a
400-digit integer into an int that raises OverflowError wherever it meets a float or a C
integer, and raises RecursionError on 100 000 nested brackets. Every reader of outside JSON
(bench results, ``--calibrate``, ``--link``, config.json, node answers) goes through here,
so none of them has to catch those. Python 3.9 (the node side uses it too).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from halo_cluster.bounded.infile import read_text
from halo_cluster.errors import HaloError, UsageError

MAX_DEPTH = 100  # no document halo reads nests a tenth as deep
INT_MIN, INT_MAX = -(1 << 63), (1 << 64) - 1  # every count halo keeps fits in 64 bits
_INT_DIGITS = len(str(INT_MAX))


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _none(_name: str) -> None:
    return None


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:24]} is out of range")
    return value


def _int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > _INT_DIGITS:  # before int(): a 10**6-digit number costs seconds
        raise ValueError(f"number {text[:24]}... ({len(digits)} digits) is out of range")
    value = int(text)
    if not INT_MIN <= value <= INT_MAX:
        raise ValueError(f"number {text} is out of range")
    return value


def _float_or_none(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def loads(text: str | bytes, max_depth: int = MAX_DEPTH, non_finite_as_none: bool = False) -> Any:
    """``text`` parsed: ValueError (one line) for anything but JSON of finite numbers within
    64 bits (integers) or a float's range, nested at most ``max_depth`` deep. With
    ``non_finite_as_none``, ``NaN``, ``Infinity`` and a float out of range are read as None
    instead (an engine's answer says -Infinity for a token it rules out: a number nobody
    has, not garbage)."""
    constant, number = (_none, _float_or_none) if non_finite_as_none else (_constant, _float)
    try:
        data = json.loads(text, parse_constant=constant, parse_float=number, parse_int=_int)
    except RecursionError:
        raise ValueError(f"nested deeper than {max_depth} levels") from None
    if _brackets(text) > max_depth and _depth(data) > max_depth:
        raise ValueError(f"nested deeper than {max_depth} levels")
    return data


def load_file(
    path: str | os.PathLike[str],
    limit: int,
    what: str,
    error: type[HaloError] = UsageError,
) -> Any:
    """The JSON in the regular file ``path`` (at most ``limit`` bytes, see bounded/infile.py); one
    line of ``error`` naming the file when it is not that (``what``: "a halo result")."""
    text = read_text(path, limit, what, error)
    try:
        return loads(text)
    except ValueError as err:
        raise error(f"{path}: not JSON ({err})") from None


def _brackets(text: str | bytes) -> int:
    """How many containers ``text`` could open at most (no walk needed below MAX_DEPTH)."""
    if isinstance(text, str):
        return text.count("[") + text.count("{")
    return text.count(b"[") + text.count(b"{")


def _depth(data: Any) -> int:
    """How deep ``data`` nests (a scalar 0, ``[]`` 1), without recursion."""
    deepest = 0
    stack = [(data, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest
