"""The metadata of a GGUF file's header, read with the standard library only (the node side
has no gguf package): enough for a model's layer count before llama.cpp loads it.

Layout (GGUF v2/v3): magic ``GGUF``, u32 version, u64 tensor count, u64 key/value count,
then each key (u64 length + UTF-8) with a u32 value type and its value; strings are u64
length + bytes, arrays a u32 element type, a u64 count and the elements. A file written on a
big-endian machine has every number byte-swapped (its version reads as 0x02000000 or
0x03000000 little-endian)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from halo_cluster.errors import UsageError

_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
STRING, ARRAY = 8, 9
MAX_KEYS = 1 << 20  # more than any real model has: a guard against garbage counts
MAX_STRING = 1 << 26


Done = Callable[[dict[str, Any]], bool]


def read_metadata(path: Path, done: Done | None = None) -> dict[str, Any]:
    """The header's key/value pairs (arrays as lists), or those read until ``done`` says
    enough. UsageError (one line) for a file that is not GGUF, truncated or corrupt."""
    try:
        with open(path, "rb") as stream:
            return _read(stream, done)
    except OSError as err:
        raise UsageError(f"{path}: {err.strerror or err}") from None
    except (EOFError, struct.error):
        raise UsageError(f"{path}: truncated GGUF header") from None
    except (UnicodeDecodeError, ValueError) as err:
        raise UsageError(f"{path}: corrupt GGUF header ({err})") from None


def block_count(path: Path) -> int:
    """The model's number of transformer blocks (``<architecture>.block_count``)."""

    def found(meta: dict[str, Any]) -> bool:
        arch = meta.get("general.architecture")
        return isinstance(arch, str) and f"{arch}.block_count" in meta

    meta = read_metadata(path, found)  # not the vocabulary's long arrays that follow
    arch = meta.get("general.architecture")
    count = meta.get(f"{arch}.block_count") if isinstance(arch, str) else None
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        raise UsageError(f"{path}: no block count in the GGUF header (architecture {arch!r})")
    return count


def _read(stream: IO[bytes], done: Done | None) -> dict[str, Any]:
    if _take(stream, 4) != b"GGUF":
        raise ValueError("not a GGUF file (no GGUF magic)")
    order = "<"
    version = struct.unpack("<I", _take(stream, 4))[0]
    if version not in (2, 3):
        order = ">"
        version = struct.unpack(">I", struct.pack("<I", version))[0]
        if version not in (2, 3):
            raise ValueError("unknown GGUF version (this reader knows versions 2 and 3)")
    _tensors, keys = struct.unpack(order + "QQ", _take(stream, 16))
    if keys > MAX_KEYS:
        raise ValueError(f"{keys} keys")
    found: dict[str, Any] = {}
    for _ in range(keys):
        key = _string(stream, order)
        kind = struct.unpack(order + "I", _take(stream, 4))[0]
        found[key] = _value(stream, order, kind)
        if done is not None and done(found):
            break
    return found


def _value(stream: IO[bytes], order: str, kind: int) -> Any:
    if kind in _SCALARS:
        code = _SCALARS[kind]
        return struct.unpack(order + code, _take(stream, struct.calcsize(code)))[0]
    if kind == STRING:
        return _string(stream, order)
    if kind == ARRAY:
        inner, count = struct.unpack(order + "IQ", _take(stream, 12))
        if count > MAX_STRING or inner == ARRAY:
            raise ValueError(f"an array of {count} elements of type {inner}")
        return [_value(stream, order, inner) for _ in range(count)]
    raise ValueError(f"unknown value type {kind}")


def _string(stream: IO[bytes], order: str) -> str:
    length = struct.unpack(order + "Q", _take(stream, 8))[0]
    if length > MAX_STRING:
        raise ValueError(f"a string of {length} bytes")
    return _take(stream, length).decode("utf-8")


def _take(stream: IO[bytes], size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise EOFError
    return data
