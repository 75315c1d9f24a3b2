"""A GGUF file's header — its metadata and its tensor table — read with the standard library
and with bounds, for both sides: a node reads a model's block count before llama.cpp loads it
(``gguf-layers``), the controller the whole model (``halo plan --gguf``, ``halo serve`` with a
local file; capacity/gguf_file.py). Python 3.9.

Layout (GGUF v2/v3): magic ``GGUF``, u32 version, u64 tensor count, u64 key/value count,
then each key (u64 length + UTF-8) with a u32 value type and its value; strings are u64
length + bytes, arrays a u32 element type, a u64 count and the elements. Then per tensor:
its name, u32 dimension count, u64 per dimension, u32 type, u64 offset into the data, which
starts at the next multiple of ``general.alignment`` (32). A file written on a big-endian
machine has every number byte-swapped (its version reads as 0x02000000 little-endian).

Bounds, so that no header makes the reader slow or large: an array longer than KEEP_ARRAY
elements, or a string longer than KEEP_STRING bytes, is skipped (a ``Skipped`` stands for it,
with its length), and so is any once KEEP_ELEMENTS elements / KEEP_BYTES bytes are kept; a
count or length that runs past the end of the file is a truncated file, found by arithmetic,
never by reading; a header with more than MAX_KEYS keys, MAX_TENSORS tensors or
MAX_SCANNED strings in skipped arrays is refused. Errors are one UsageError line that quotes
at most a few dozen characters of what the file holds.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

from halo_cluster.bounded.infile import open_regular
from halo_cluster.errors import UsageError
from halo_cluster.jsonout import JsonObject

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
MAX_KEYS = 1 << 14  # real models have under a hundred
MAX_KEY = 1 << 12  # bytes in a key
MAX_TENSORS = 1 << 17  # a model with per-expert tensors has some tens of thousands
MAX_NAME = 1 << 8  # bytes in a tensor name (ggml's own limit is 64)
MAX_DIMS = 8  # ggml has 4
MAX_SCANNED = 1 << 24  # strings walked in skipped arrays (a vocabulary: up to ~260 000)
KEEP_ARRAY = 1 << 16  # elements of one array kept
KEEP_ELEMENTS = 1 << 20  # elements kept in all arrays
KEEP_STRING = 1 << 20  # bytes of one string kept (a chat template: some KiB)
KEEP_BYTES = 1 << 26  # bytes kept in all strings
MAX_BLOCKS = 100_000  # a block count above this is not a model (llama.cpp offloads per block)
_CHUNK = 1 << 20

Done = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class Skipped:
    """A value too long to keep: a string (``kind`` 8) of ``length`` bytes, or an array of
    ``length`` elements of type ``kind``."""

    kind: int
    length: int

    def __repr__(self) -> str:
        if self.kind == STRING:
            return f"<a string of {self.length} bytes>"
        return f"<an array of {self.length} elements of type {self.kind}>"


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    kind: int  # ggml type (GGMLQuantizationType)
    offset: int  # from the start of the data section


@dataclass(frozen=True)
class Header:
    metadata: dict[str, Any]
    tensors: tuple[Tensor, ...]
    data_start: int  # where the tensor data begins in the file
    size: int  # the file's size in bytes


def shown(value: Any, limit: int = 60) -> str:
    """``value`` for an error line: escaped, at most ``limit`` characters."""
    text = ascii(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_metadata(path: os.PathLike[str] | str, done: Done | None = None) -> dict[str, Any]:
    """The header's key/value pairs (arrays as lists, long values as ``Skipped``), or those
    read until ``done`` says enough. UsageError (one line) for a file that is not GGUF, is not
    a regular file, is truncated or corrupt."""
    found: dict[str, Any] = _parse(path, lambda reader: reader.metadata(done))
    return found


def read_header(path: os.PathLike[str] | str) -> Header:
    """The metadata and the tensor table; a tensor whose data would lie past the end of the
    file, or a table larger than the bounds, is one UsageError line."""
    header: Header = _parse(path, lambda reader: reader.header())
    return header


def block_count(path: os.PathLike[str] | str) -> int:
    """The model's number of transformer blocks (``<architecture>.block_count``), 1 to
    MAX_BLOCKS."""

    def found(meta: dict[str, Any]) -> bool:
        arch = meta.get("general.architecture")
        return isinstance(arch, str) and f"{arch}.block_count" in meta

    meta = read_metadata(path, found)  # not the vocabulary's long arrays that follow
    arch = meta.get("general.architecture")
    count = meta.get(f"{arch}.block_count") if isinstance(arch, str) else None
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        raise UsageError(f"{path}: no block count in the GGUF header (architecture {shown(arch)})")
    if count > MAX_BLOCKS:
        raise UsageError(
            f"{path}: block count {count} in the GGUF header is not a model's"
            f" (at most {MAX_BLOCKS})"
        )
    return count


def _parse(path: os.PathLike[str] | str, read: Callable[[_Reader], Any]) -> Any:
    with open_regular(path) as handle:
        try:
            return read(_Reader(handle, os.fstat(handle.fileno()).st_size, path))
        except OSError as err:
            raise UsageError(f"cannot read {path}: {err.strerror or err}") from None
        except EOFError:
            raise UsageError(f"{path}: truncated GGUF header") from None
        except (UnicodeDecodeError, ValueError, struct.error) as err:
            raise UsageError(
                f"{path}: corrupt GGUF header ({shown(str(err), 120)[1:-1]})"
            ) from None


class _Stream:
    """The file through one buffer: ``take`` and ``skip`` check every length against the
    file's size first (EOFError), so no count from the file makes it read or allocate more."""

    def __init__(self, handle: BinaryIO, size: int) -> None:
        self.handle, self.size = handle, size
        self.buf, self.at, self.base = b"", 0, 0  # buf holds the file from offset base

    @property
    def pos(self) -> int:
        return self.base + self.at

    def take(self, n: int) -> bytes:
        if n > self.size - self.pos:
            raise EOFError
        if self.at + n > len(self.buf):
            self.fill(n)
        data = self.buf[self.at : self.at + n]
        self.at += n
        return data

    def skip(self, n: int) -> None:
        if n > self.size - self.pos:
            raise EOFError
        if self.at + n <= len(self.buf):
            self.at += n
            return
        self.base = self.pos + n
        self.buf, self.at = b"", 0
        self.handle.seek(self.base)

    def fill(self, n: int) -> None:
        """At least ``n`` bytes from ``pos`` in the buffer."""
        rest = self.buf[self.at :]
        self.base += self.at
        more = self.handle.read(max(n - len(rest), _CHUNK))
        self.buf, self.at = rest + more, 0
        if len(self.buf) < n:
            raise EOFError  # the file shrank under us


class _Reader:
    def __init__(self, handle: BinaryIO, size: int, path: os.PathLike[str] | str) -> None:
        self.stream = _Stream(handle, size)
        self.path = path  # for the errors that say it is no GGUF file at all
        self.order = "<"
        self.kept_elements = self.kept_bytes = self.scanned = 0

    def unpack(self, code: str) -> Any:
        fmt = self.order + code
        return struct.unpack(fmt, self.stream.take(struct.calcsize(fmt)))[0]

    def start(self) -> tuple[int, int]:
        """The magic, the version (and so the byte order); the tensor and key counts."""
        head = self.stream.take(min(4, self.stream.size))
        if head != b"GGUF":
            if b"GGUF".startswith(head):
                raise EOFError
            raise UsageError(f"{self.path}: not a GGUF file (it starts with {head!r}, not b'GGUF')")
        version = self.unpack("I")
        if version not in (2, 3):
            swapped = struct.unpack(">I", struct.pack("<I", version))[0]
            if swapped not in (2, 3):
                raise UsageError(
                    f"{self.path}: unknown GGUF version {version}"
                    " (this reader knows versions 2 and 3)"
                )
            self.order = ">"
        tensors, keys = self.unpack("Q"), self.unpack("Q")
        if keys > MAX_KEYS:
            raise ValueError(f"{keys} keys")
        if tensors > MAX_TENSORS:
            raise ValueError(f"{tensors} tensors")
        return tensors, keys

    def metadata(self, done: Done | None, keys: int | None = None) -> dict[str, Any]:
        if keys is None:
            keys = self.start()[1]
        found: JsonObject = {}
        for _ in range(keys):
            key = self.string(MAX_KEY, "a key")
            kind = self.unpack("I")
            found[key] = self.value(kind)
            if done is not None and done(found):
                break
        return found

    def header(self) -> Header:
        count, keys = self.start()
        meta = self.metadata(None, keys)
        tensors = tuple(self.tensor() for _ in range(count))
        alignment = meta.get("general.alignment", 32)
        if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0:
            raise ValueError(f"general.alignment is {shown(alignment)}")
        start = -(-self.stream.pos // alignment) * alignment
        return Header(meta, tensors, start, self.stream.size)

    def tensor(self) -> Tensor:
        name = self.string(MAX_NAME, "a tensor name")
        dims = self.unpack("I")
        if dims > MAX_DIMS:
            raise ValueError(f"tensor {shown(name)} has {dims} dimensions")
        shape = tuple(self.unpack("Q") for _ in range(dims))
        return Tensor(name, shape, self.unpack("I"), self.unpack("Q"))

    def string(self, limit: int, what: str) -> str:
        length = self.unpack("Q")
        if length > limit:
            raise ValueError(f"{what} of {length} bytes")
        return self.stream.take(length).decode("utf-8")

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == STRING:
            length = self.unpack("Q")
            if length > KEEP_STRING or self.kept_bytes + length > KEEP_BYTES:
                self.stream.skip(length)
                return Skipped(STRING, length)
            self.kept_bytes += length
            return self.stream.take(length).decode("utf-8")
        if kind == ARRAY:
            return self.array()
        raise ValueError(f"unknown value type {kind}")

    def array(self) -> Any:
        inner, count = self.unpack("I"), self.unpack("Q")
        if inner == ARRAY or (inner != STRING and inner not in _SCALARS):
            raise ValueError(f"an array of {count} elements of type {inner}")
        if count <= KEEP_ARRAY and self.kept_elements + count <= KEEP_ELEMENTS:
            if inner in _SCALARS:  # all at once: the length is checked against the file first
                code = self.order + str(count) + _SCALARS[inner]
                self.kept_elements += count
                return list(struct.unpack(code, self.stream.take(struct.calcsize(code))))
            self.kept_elements += count
            return [self.value(STRING) for _ in range(count)]
        if inner in _SCALARS:
            self.stream.skip(count * struct.calcsize(_SCALARS[inner]))
        else:
            self.skip_strings(count)
        return Skipped(inner, count)

    def skip_strings(self, count: int) -> None:
        """Past ``count`` strings, reading only their lengths (a vocabulary: in one pass over
        the buffer, not a call per string)."""
        if count * 8 > self.stream.size - self.stream.pos:
            raise EOFError
        self.scanned += count
        if self.scanned > MAX_SCANNED:
            raise ValueError(f"more than {MAX_SCANNED} strings in arrays")
        length_at = struct.Struct(self.order + "Q").unpack_from
        stream, left = self.stream, count
        while left:
            if stream.at + 8 > len(stream.buf):
                stream.fill(8)
            buf, at, end = stream.buf, stream.at, len(stream.buf)
            while left and at + 8 <= end:
                at += 8 + length_at(buf, at)[0]
                left -= 1
            if at > end:  # the last string runs past the buffer: skip (and check) the rest
                stream.at = end
                stream.skip(at - end)
            else:
                stream.at = at
