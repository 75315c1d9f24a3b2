"""Strict JSON on stdout, shared by the command line and the node side."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any, Union


def emit_json(data: Any, out: IO[str] | None = None) -> None:
    """Strict JSON: a number that is not finite (NaN, Infinity) is written as null."""
    stream = out or sys.stdout
    json.dump(finite(data), stream, indent=2, allow_nan=False)
    stream.write("\n")


def finite(data: Any) -> Any:
    """``data`` with every NaN/Infinity replaced by None (JSON has no such numbers)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):  # not list | tuple: Python 3.9 on nodes
        return [finite(v) for v in data]
    return data


# A JSON value as halo writes it: what ``to_dict`` returns is checked to be made of these,
# so a path, a set or a dataclass left in a result is a type error, not a crash at dump.
# The containers are read-only views so a dict[str, float] is one too; a tuple is written
# as a list.
JsonValue = Union[None, bool, int, float, str, Sequence["JsonValue"], Mapping[str, "JsonValue"]]
JsonObject = dict[str, JsonValue]  # what a to_dict returns: a JSON object to add to
