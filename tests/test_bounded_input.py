"""The two helpers every outside input goes through: bounded/infile.py (a file someone named: a
regular file only, never more than its limit) and bounded/jsonin.py (JSON of finite numbers within
64 bits, nested at most 100 deep). Each refusal is one line naming the file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halo_cluster.bounded.infile import open_regular, read_bytes, read_text, size_text
from halo_cluster.bounded.jsonin import MAX_DEPTH, load_file, loads
from halo_cluster.errors import ConfigError, UsageError


def test_a_regular_file_within_its_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_bytes(b"\xef\xbb\xbf" + '{"x": "é"}'.encode())
    assert read_bytes(path, 100, "a test file") == b'\xef\xbb\xbf{"x": "\xc3\xa9"}'
    assert read_text(path, 100, "a test file") == '{"x": "é"}'  # the BOM dropped
    assert load_file(path, 100, "a test file") == {"x": "é"}
    link = tmp_path / "link.json"
    link.symlink_to(path)
    assert load_file(link, 100, "a test file") == {"x": "é"}  # a link to a file is followed


def test_everything_but_a_regular_file_is_refused_before_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "zero").symlink_to("/dev/zero")
    cases = {
        tmp_path: f"{tmp_path}: a directory, not a regular file",
        fifo: f"{fifo}: a FIFO, not a regular file",
        Path("/dev/zero"): "/dev/zero: a character device, not a regular file",
        tmp_path / "zero": f"{tmp_path / 'zero'}: a character device, not a regular file",
        tmp_path / "none": f"cannot read {tmp_path / 'none'}: No such file or directory",
        Path("a\0b"): "cannot read 'a\\x00b': a NUL in the file name",
    }
    got = {}
    for path, _message in cases.items():
        with pytest.raises(UsageError) as err:
            read_bytes(path, 1 << 20, "a test file")
        got[path] = str(err.value)
    assert got == cases
    with pytest.raises(ConfigError, match="a FIFO, not a regular file"):
        open_regular(fifo, ConfigError)  # the caller's error class


def test_a_fifo_with_a_writer_and_data_is_refused_too(tmp_path: Path) -> None:
    """The type is asked of what was opened, whatever the other end holds."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    held = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a writer, without waiting for a reader
    try:
        os.write(held, b"{}")
        with pytest.raises(UsageError, match="a FIFO, not a regular file"):
            load_file(fifo, 100, "a test file")
        assert os.read(held, 10) == b"{}"  # nothing was read from it
    finally:
        os.close(held)


def test_one_byte_over_the_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * 1025)
    assert len(read_bytes(path, 1025, "a test file")) == 1025
    with pytest.raises(UsageError) as err:
        read_bytes(path, 1024, "a test file")
    assert str(err.value) == f"{path}: larger than 1 KiB; not a test file"
    assert [size_text(n) for n in (1 << 20, 64 << 20, 1 << 30, 1000)] == [
        "1 MiB",
        "64 MiB",
        "1 GiB",
        "1000 bytes",
    ]


def test_text_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1"
    path.write_bytes(b'{"x": "\xe9"}')
    with pytest.raises(UsageError) as err:
        load_file(path, 100, "a test file")
    assert str(err.value) == f"{path}: not UTF-8 text (byte 7)"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"x": NaN}', "NaN is not a number JSON allows"),
        ('{"x": -Infinity}', "-Infinity is not a number JSON allows"),
        ('{"x": 1e400}', "number 1e400 is out of range"),
        ('{"x": -1.5e999}', "number -1.5e999 is out of range"),
        ('{"x": 1' + "0" * 400 + "}", f"number 1{'0' * 23}... (401 digits) is out of range"),
        ('{"x": 18446744073709551616}', "number 18446744073709551616 is out of range"),
        ('{"x": -9223372036854775809}', "number -9223372036854775809 is out of range"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper than 100 levels"),
        ("[" * 101 + "]" * 101, "nested deeper than 100 levels"),
        ('{"a": ' * 101 + "1" + "}" * 101, "nested deeper than 100 levels"),
        ("{nope", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ],
)
def test_json_that_is_refused(tmp_path: Path, text: str, reason: str) -> None:
    with pytest.raises(ValueError) as err:
        loads(text)
    assert str(err.value) == reason
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(UsageError) as refused:
        load_file(path, 1 << 20, "a test file")
    assert str(refused.value) == f"{path}: not JSON ({reason})"


def test_json_at_the_bounds_is_read() -> None:
    assert loads('{"x": [18446744073709551615, -9223372036854775808, 1e308, 1e-400]}') == {
        "x": [2**64 - 1, -(2**63), 1e308, 0.0]
    }
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None  # exactly 100 deep
    assert loads(b'{"bytes": true}') == {"bytes": True}
    # brackets inside strings are not nesting
    assert loads(json.dumps({"s": "[" * 500})) == {"s": "[" * 500}


finite = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(finite)
def test_any_json_python_writes_of_finite_numbers_reads_back(data: object) -> None:
    assert loads(json.dumps(data)) == data


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='[]{}"0123456789.eE+-:,NaInfity tru', max_size=80))
def test_any_text_is_data_or_one_value_error(text: str) -> None:
    try:
        loads(text)
    except ValueError as err:
        assert "\n" not in str(err)
