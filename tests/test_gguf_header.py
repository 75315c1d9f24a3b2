"""The standard-library GGUF header reader (modelstore/gguf_header.py) against the gguf package's own
GGUFReader, on files its GGUFWriter wrote (both byte orders); and on anything else, nothing
but a one-line UsageError."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from halo_cluster.errors import UsageError
from halo_cluster.modelstore import gguf_header
from halo_cluster.modelstore.gguf_header import KEEP_ARRAY, Skipped, block_count, read_metadata

T = gguf.GGUFValueType
LITTLE, BIG = gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG
Entry = tuple[str, Any, "gguf.GGUFValueType", "gguf.GGUFValueType | None"]


def write(
    path: Path, entries: list[Entry], arch: str = "llama", endian: gguf.GGUFEndian = LITTLE
) -> Path:
    writer = gguf.GGUFWriter(path, arch, endianess=endian)
    for key, value, vtype, sub in entries:
        writer.add_key_value(key, value, vtype, sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def reference(path: Path) -> dict[str, Any]:
    """The key/value pairs as the gguf package reads them (its own GGUF.* fields left out)."""
    reader = gguf.GGUFReader(path)
    return {
        key: field.contents() for key, field in reader.fields.items() if not key.startswith("GGUF.")
    }


def kv_end(path: Path) -> int:
    """Where the key/value section ends, by the gguf package."""
    reader = gguf.GGUFReader(path)
    return max(f.offset + sum(p.nbytes for p in f.parts) for f in reader.fields.values())


RICH: list[Entry] = [
    ("llama.block_count", 3, T.UINT32, None),
    ("t.u8", 200, T.UINT8, None),
    ("t.i8", -100, T.INT8, None),
    ("t.u16", 60000, T.UINT16, None),
    ("t.i16", -30000, T.INT16, None),
    ("t.i32", -(2**31), T.INT32, None),
    ("t.u64", 2**64 - 1, T.UINT64, None),
    ("t.i64", -(2**63), T.INT64, None),
    ("t.f32", 0.5, T.FLOAT32, None),
    ("t.f64", -1e300, T.FLOAT64, None),
    ("t.yes", True, T.BOOL, None),
    ("t.no", False, T.BOOL, None),
    ("t.name", "Llama ünïcode ✓", T.STRING, None),
    ("t.empty", "", T.STRING, None),
    ("t.ints", [1, -2, 3], T.ARRAY, T.INT32),
    ("t.u64s", [0, 2**64 - 1], T.ARRAY, T.UINT64),
    ("t.floats", [0.25, -2.0], T.ARRAY, T.FLOAT32),
    ("t.strings", ["a", "", "ß✓"], T.ARRAY, T.STRING),
]

RICH_EXPECTED = {
    "general.architecture": "llama",
    "llama.block_count": 3,
    "t.u8": 200,
    "t.i8": -100,
    "t.u16": 60000,
    "t.i16": -30000,
    "t.i32": -(2**31),
    "t.u64": 2**64 - 1,
    "t.i64": -(2**63),
    "t.f32": 0.5,
    "t.f64": -1e300,
    "t.yes": True,
    "t.no": False,
    "t.name": "Llama ünïcode ✓",
    "t.empty": "",
    "t.ints": [1, -2, 3],
    "t.u64s": [0, 2**64 - 1],
    "t.floats": [0.25, -2.0],
    "t.strings": ["a", "", "ß✓"],
}


@pytest.mark.parametrize("endian", [LITTLE, BIG], ids=["little", "big"])
def test_a_rich_header_reads_as_the_gguf_package_reads_it(
    tmp_path: Path, endian: gguf.GGUFEndian
) -> None:
    path = write(tmp_path / "rich.gguf", RICH, endian=endian)
    meta = read_metadata(path)
    assert meta == RICH_EXPECTED
    assert meta == reference(path)
    assert [type(meta[k]) for k in ("t.yes", "t.u8", "t.f32")] == [bool, int, float]
    assert block_count(path) == 3


VOCAB = 20_000  # a real one has 32k-256k entries; enough to see it skipped


@pytest.mark.parametrize("endian", [LITTLE, BIG], ids=["little", "big"])
def test_block_count_stops_before_the_vocabulary(tmp_path: Path, endian: gguf.GGUFEndian) -> None:
    tokens = [f"tok{i}" for i in range(VOCAB)]
    entries: list[Entry] = [
        ("llama.block_count", 40, T.UINT32, None),
        ("tokenizer.ggml.tokens", tokens, T.ARRAY, T.STRING),
        ("tokenizer.ggml.token_type", [1] * VOCAB, T.ARRAY, T.INT32),
        ("tokenizer.ggml.bos_token_id", 1, T.UINT32, None),
    ]
    path = write(tmp_path / "vocab.gguf", entries, endian=endian)
    meta = read_metadata(path)
    assert meta == reference(path)
    assert (meta["tokenizer.ggml.tokens"][-1], len(meta["tokenizer.ggml.token_type"])) == (
        f"tok{VOCAB - 1}",
        VOCAB,
    )
    assert read_metadata(path, lambda m: "llama.block_count" in m) == {
        "general.architecture": "llama",
        "llama.block_count": 40,
    }
    # cut in the middle of the vocabulary: the whole header is truncated, the layer count is not
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(UsageError) as err:
        read_metadata(cut)
    assert str(err.value) == f"{cut}: truncated GGUF header"
    assert block_count(cut) == 40


def test_the_block_count_key_may_come_before_the_architecture(tmp_path: Path) -> None:
    # GGUFWriter writes general.architecture first: build the other order by hand
    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text.encode())) + text.encode()

    body = (
        string("qwen2.block_count")
        + struct.pack("<IQ", 10, 28)
        + string("general.architecture")
        + struct.pack("<I", 8)
        + string("qwen2")
        + string("general.name")
        + struct.pack("<I", 8)
        + string("after")
    )
    path = tmp_path / "order.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 3) + body)
    assert read_metadata(path) == {
        "qwen2.block_count": 28,
        "general.architecture": "qwen2",
        "general.name": "after",
    }
    assert block_count(path) == 28


@pytest.mark.parametrize(
    ("entries", "arch"),
    [
        ([], "'llama'"),
        ([("llama.block_count", 0, T.UINT32, None)], "'llama'"),
        ([("llama.block_count", True, T.BOOL, None)], "'llama'"),
        ([("llama.block_count", 3.0, T.FLOAT32, None)], "'llama'"),
        ([("llama.block_count", "3", T.STRING, None)], "'llama'"),
        ([("llama.block_count", -3, T.INT32, None)], "'llama'"),
        ([("qwen2.block_count", 3, T.UINT32, None)], "'llama'"),  # another architecture's key
    ],
)
def test_no_usable_block_count(tmp_path: Path, entries: list[Entry], arch: str) -> None:
    path = write(tmp_path / "m.gguf", entries)
    with pytest.raises(UsageError) as err:
        block_count(path)
    assert str(err.value) == f"{path}: no block count in the GGUF header (architecture {arch})"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "truncated GGUF header"),
        (b"GGU", "truncated GGUF header"),
        (
            b"PK\x03\x04" + bytes(40),
            "not a GGUF file (it starts with b'PK\\x03\\x04', not b'GGUF')",
        ),
        (
            b"GGUF" + struct.pack("<I", 1) + bytes(16),
            "unknown GGUF version 1 (this reader knows versions 2 and 3)",
        ),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 2**40), f"corrupt GGUF header ({2**40} keys)"),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**40),
            f"corrupt GGUF header (a key of {2**40} bytes)",
        ),
        (  # a value's length past the end of the file: found by arithmetic, nothing read
            b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 1) + b"k" + struct.pack("<IQ", 8, 2**40),
            "truncated GGUF header",
        ),
        (
            b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 1) + b"k" + struct.pack("<IIQ", 9, 8, 2**62),
            "truncated GGUF header",
        ),
        (b"GGUF" + struct.pack("<IQQ", 3, 2**40, 0), f"corrupt GGUF header ({2**40} tensors)"),
        (
            b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 1) + b"k" + struct.pack("<I", 13),
            "corrupt GGUF header (unknown value type 13)",
        ),
        (
            b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 1) + b"k" + struct.pack("<IIQ", 9, 9, 1),
            "corrupt GGUF header (an array of 1 elements of type 9)",
        ),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"\xff", None),
    ],
)
def test_broken_headers(tmp_path: Path, data: bytes, message: str | None) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(UsageError) as err:
        read_metadata(path)
    if message is None:  # a key that is not UTF-8: the decoder's own words
        assert str(err.value).startswith(f"{path}: corrupt GGUF header (")
        assert "utf-8" in str(err.value)
    else:
        assert str(err.value) == f"{path}: {message}"


@pytest.mark.parametrize("endian", [LITTLE, BIG], ids=["little", "big"])
def test_a_header_truncated_at_every_length(tmp_path: Path, endian: gguf.GGUFEndian) -> None:
    path = write(tmp_path / "rich.gguf", RICH, endian=endian)
    data = path.read_bytes()
    end = kv_end(path)
    cut = tmp_path / "cut.gguf"
    got = {}
    for n in range(len(data) + 1):
        cut.write_bytes(data[:n])
        try:
            got[n] = read_metadata(cut) == RICH_EXPECTED
        except UsageError as err:
            got[n] = str(err)
    assert got == {
        n: (f"{cut}: truncated GGUF header" if n < end else True) for n in range(len(data) + 1)
    }


# -- hypothesis ------------------------------------------------------------------------------

INT_RANGES = {
    T.UINT8: (0, 2**8 - 1),
    T.INT8: (-(2**7), 2**7 - 1),
    T.UINT16: (0, 2**16 - 1),
    T.INT16: (-(2**15), 2**15 - 1),
    T.UINT32: (0, 2**32 - 1),
    T.INT32: (-(2**31), 2**31 - 1),
    T.UINT64: (0, 2**64 - 1),
    T.INT64: (-(2**63), 2**63 - 1),
}


def scalar(kind: gguf.GGUFValueType) -> st.SearchStrategy[Any]:
    if kind in INT_RANGES:
        return st.integers(*INT_RANGES[kind])
    if kind == T.FLOAT32:
        return st.floats(width=32, allow_nan=False)
    if kind == T.FLOAT64:
        return st.floats(allow_nan=False)
    if kind == T.BOOL:
        return st.booleans()
    return st.text(max_size=20)


KINDS = [*INT_RANGES, T.FLOAT32, T.FLOAT64, T.BOOL, T.STRING]


@st.composite
def entry(draw: Callable[..., Any]) -> tuple[Any, Any, Any]:
    kind = draw(st.sampled_from(KINDS))
    if draw(st.booleans()):
        return draw(st.lists(scalar(kind), min_size=1, max_size=6)), T.ARRAY, kind
    return draw(scalar(kind)), kind, None


headers = st.tuples(
    st.dictionaries(st.text(min_size=1, max_size=12).map(lambda k: "k." + k), entry(), max_size=8),
    st.sampled_from([LITTLE, BIG]),
    st.text(min_size=1, max_size=10),
)


@settings(max_examples=60, deadline=None)
@given(headers)
def test_any_header_written_by_gguf_reads_the_same(header: tuple[dict[str, Any], Any, str]) -> None:
    values, endian, arch = header
    entries = [(key, value, vtype, sub) for key, (value, vtype, sub) in values.items()]
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp) / "h.gguf", entries, arch=arch, endian=endian)
        meta = read_metadata(path)
        assert meta == reference(path)
        assert meta == {"general.architecture": arch, **{k: v for k, (v, _t, _s) in values.items()}}


def only_usage_errors(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.gguf"
        path.write_bytes(data)
        for read in (read_metadata, block_count):
            try:
                read(path)
            except UsageError as err:
                text = str(err)
                assert text.startswith(f"{path}: ") and "\n" not in text


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_usage_errors(data: bytes) -> None:
    only_usage_errors(data)


small = st.integers(0, 2**64 - 1) | st.integers(0, 16)
fragment = st.one_of(
    st.binary(max_size=12),
    small.map(lambda n: struct.pack("<Q", n)),
    small.map(lambda n: struct.pack(">Q", n)),
    st.integers(0, 15).map(lambda n: struct.pack("<I", n)),
    st.integers(0, 15).map(lambda n: struct.pack(">I", n)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([struct.pack("<I", 3), struct.pack(">I", 3), struct.pack("<I", 2)]),
    st.lists(fragment, max_size=12),
)
def test_gguf_magic_and_arbitrary_fields_raise_only_usage_errors(
    version: bytes, parts: list[bytes]
) -> None:
    only_usage_errors(b"GGUF" + version + b"".join(parts))


@settings(max_examples=15, deadline=None)
@given(headers)
def test_any_written_header_truncated_anywhere(header: tuple[dict[str, Any], Any, str]) -> None:
    values, endian, arch = header
    entries = [(key, value, vtype, sub) for key, (value, vtype, sub) in values.items()]
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp) / "h.gguf", entries, arch=arch, endian=endian)
        data, end = path.read_bytes(), kv_end(path)
        cut = Path(tmp) / "cut.gguf"
        for n in range(end):
            cut.write_bytes(data[:n])
            with pytest.raises(UsageError, match=r"truncated GGUF header$"):
                read_metadata(cut)


# -- bounds: a header built to exhaust the reader ------------------------------------------
SPARSE = 64 << 20  # the file's size: mostly a hole, as a hostile file can be


def gguf_string(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


ARCH = gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("llama")
BLOCKS = gguf_string("llama.block_count") + struct.pack("<II", 4, 32)


def sparse(path: Path, keys: int, body: bytes, tail: bytes = b"") -> Path:
    """A GGUF of SPARSE bytes: the header and ``body``, a hole, and ``tail`` at its very end."""
    with path.open("wb") as out:
        out.write(b"GGUF" + struct.pack("<IQQ", 3, 0, keys) + body)
        out.truncate(SPARSE - len(tail))
        out.seek(SPARSE - len(tail))
        out.write(tail)
    return path


def hostile(tmp_path: Path) -> dict[str, Path]:
    """One huge array before the block count (a u8 array filling the file, or 8 M empty
    strings), a 64 MiB architecture name, and a block count of 2^64 - 1."""
    huge = gguf_string("huge")
    start = 24 + len(ARCH) + len(huge) + 16  # where the u8 array's elements begin
    u8 = struct.pack("<IIQ", 9, 0, SPARSE - len(BLOCKS) - start)
    strings = struct.pack("<IIQ", 9, 8, (SPARSE - 200) // 8)
    arch = gguf_string("general.architecture") + struct.pack("<IQ", 8, SPARSE - 100)
    blocks = ARCH + gguf_string("llama.block_count") + struct.pack("<IQ", 10, 2**64 - 1)
    return {
        "u8": sparse(tmp_path / "u8.gguf", 3, ARCH + huge + u8, BLOCKS),
        "strings": sparse(tmp_path / "strings.gguf", 2, ARCH + huge + strings),
        "arch": sparse(tmp_path / "arch.gguf", 1, arch),
        "blocks": sparse(tmp_path / "blocks.gguf", 2, blocks),
    }


READ_ALL = """
import json, re, sys
from halo_cluster.errors import UsageError
from halo_cluster.modelstore.gguf_header import block_count
got = {}
for name, path in json.loads(sys.argv[1]).items():
    try:
        got[name] = block_count(path)
    except UsageError as err:
        got[name] = str(err).removeprefix(path + ": ")
# VmHWM: this process's own peak (ru_maxrss would carry the forking parent's over exec)
with open("/proc/self/status") as status:
    peak = int(re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1))
print(json.dumps({"got": got, "max_rss_kib": peak}))
"""


def test_huge_values_are_skipped_not_kept(tmp_path: Path) -> None:
    files = hostile(tmp_path)
    named = json.dumps({name: str(path) for name, path in files.items()})
    done = subprocess.run(
        [sys.executable, "-c", READ_ALL, named], capture_output=True, text=True, check=True
    )
    report = json.loads(done.stdout)
    assert report["got"] == {
        "u8": 32,  # the array is skipped with one seek, the block count after it read
        "strings": "no block count in the GGUF header (architecture 'llama')",
        "arch": "no block count in the GGUF header (architecture <a string of 67108764 bytes>)",
        "blocks": "block count 18446744073709551615 in the GGUF header is not a model's (at most 100000)",
    }
    # a Python with these modules is ~20 MiB; keeping the 8 M strings would take ~500 MiB
    assert report["max_rss_kib"] < 80 << 10, report
    meta = read_metadata(files["strings"])
    assert meta == {"general.architecture": "llama", "huge": Skipped(8, (SPARSE - 200) // 8)}


def test_counts_past_the_end_of_the_file_are_found_by_arithmetic(tmp_path: Path) -> None:
    path = sparse(tmp_path / "short.gguf", 1, gguf_string("k") + struct.pack("<IIQ", 9, 12, 2**61))
    with pytest.raises(UsageError) as err:
        read_metadata(path)
    assert str(err.value) == f"{path}: truncated GGUF header"


def test_too_many_strings_in_arrays_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gguf_header, "MAX_SCANNED", 1000)
    entries: list[Entry] = [("t.s", [str(i) for i in range(70_000)], T.ARRAY, T.STRING)]
    path = write(tmp_path / "many.gguf", entries)
    with pytest.raises(UsageError) as err:
        read_metadata(path)
    assert str(err.value) == f"{path}: corrupt GGUF header (more than 1000 strings in arrays)"


def test_long_arrays_keep_their_length_and_type(tmp_path: Path) -> None:
    tokens = [f"t{i}" for i in range(KEEP_ARRAY + 1)]
    entries: list[Entry] = [
        ("tokenizer.ggml.tokens", tokens, T.ARRAY, T.STRING),
        ("tokenizer.ggml.scores", [0.5] * (KEEP_ARRAY + 1), T.ARRAY, T.FLOAT32),
        ("llama.block_count", 7, T.UINT32, None),
    ]
    path = write(tmp_path / "vocab.gguf", entries)
    assert read_metadata(path) == {
        "general.architecture": "llama",
        "tokenizer.ggml.tokens": Skipped(8, KEEP_ARRAY + 1),
        "tokenizer.ggml.scores": Skipped(6, KEEP_ARRAY + 1),
        "llama.block_count": 7,
    }
    assert block_count(path) == 7


def test_a_fifo_or_a_device_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.gguf"
    os.mkfifo(fifo)
    for path, kind in (
        (fifo, "a FIFO"),
        (Path("/dev/zero"), "a character device"),
        (tmp_path, "a directory"),
    ):
        with pytest.raises(UsageError) as err:
            block_count(path)
        assert str(err.value) == f"{path}: {kind}, not a regular file"
