"""The fields of a parsed JSON answer, read with their types checked: what every parser of
the model store's values (``transfer``, ``answers``) reads a field with. A field that is not
what it should be is one ``ModelError`` naming where it is (standard library only, Python
3.9: both sides import it)."""

from __future__ import annotations

from typing import Any

from halo_cluster.errors import ModelError


def obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ModelError(f"{where}: not a JSON object")
    return value


def items(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ModelError(f"{where}: not a list")
    return value


def whole(value: Any, where: str, default: int | None = None) -> int:
    """A whole number of 0 or more (``default`` where the field is absent)."""
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelError(f"{where}: not a whole number of 0 or more")
    return value


def text(value: Any, where: str, default: str | None = None) -> str:
    if value is None and default is not None:
        return default
    if not isinstance(value, str):
        raise ModelError(f"{where}: not a string")
    return value


def number(value: Any, where: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelError(f"{where}: not a number")
    return float(value)


def maybe_whole(value: Any, where: str) -> int | None:
    return None if value is None else whole(value, where)


def maybe_text(value: Any, where: str) -> str | None:
    return None if value is None else text(value, where)
