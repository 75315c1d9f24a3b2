"""A corpus of malformed result files (every field of every kind given the wrong type or
taken away, numbers out of range, nesting too deep, other schemas, cuts at every length,
binary garbage), each given to ``halo results show``, ``results show --json``, ``report``
and ``results list``: a result, or one line naming the file and the reason; never a
traceback."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.bench.test_results import collective_result, net_result, tp_result
from tests.capacity.test_calibration import serve_result
from tests.conftest import halo_here

GOOD = {
    "net": net_result,
    "collective": collective_result,
    "tp": tp_result,
    "serve": lambda: {**serve_result(), "nodes": net_result()["nodes"]},
}
WRONG: tuple[Any, ...] = ("x", None, {}, [], True, -1, 1.5)


def paths(data: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in ``data`` (of a list, only its first item: the rest are alike)."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield (*at, key)
            yield from paths(value, (*at, key))
    elif isinstance(data, list) and data:
        yield (*at, 0)
        yield from paths(data[0], (*at, 0))


def changed(data: Any, where: tuple[Any, ...], value: Any, delete: bool = False) -> Any:
    copied = copy.deepcopy(data)
    parent = copied
    for step in where[:-1]:
        parent = parent[step]
    if delete:
        del parent[where[-1]]
    else:
        parent[where[-1]] = value
    return copied


def corpus() -> dict[str, str]:
    """name -> the file's text."""
    files: dict[str, str] = {}
    for kind, make in GOOD.items():
        good = make()
        text = json.dumps(good)
        files[f"{kind}-good"] = text
        for n, where in enumerate(paths(good)):
            files[f"{kind}-{n}-deleted"] = json.dumps(changed(good, where, None, delete=True))
            for m, value in enumerate(WRONG):
                files[f"{kind}-{n}-wrong{m}"] = json.dumps(changed(good, where, value))
            sentinel = json.dumps(changed(good, where, "@@"))
            for name, raw in (("1e400", "1e400"), ("10e400", "1" + "0" * 400), ("nan", "NaN")):
                files[f"{kind}-{n}-{name}"] = sentinel.replace('"@@"', raw)
        files[f"{kind}-deep"] = text[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
        files[f"{kind}-deep-150"] = text[:-1] + ', "x": ' + "[" * 150 + "]" * 150 + "}"
        for version in ("0", "2", "", "1.0", "01"):
            files[f"{kind}-v{version}"] = text.replace("/1", f"/{version}", 1)
        for cut in range(0, len(text), max(1, len(text) // 40)):
            files[f"{kind}-cut{cut}"] = text[:cut]
        other = "net" if kind != "net" else "tp"
        files[f"{kind}-kind-{other}"] = json.dumps({**good, "kind": other})
    files["garbage"] = "\x00\x01\xff\xfe" * 100
    files["empty"] = ""
    files["list"] = "[]"
    files["string"] = '"halo.bench.net/1"'
    return files


halo = halo_here  # the CLI in this process (tests.conftest)


def one_line_or_shown(
    capsys: pytest.CaptureFixture[str], path: Path, *args: str
) -> tuple[int, str]:
    code, _out, err = halo(capsys, *args)
    assert code in (0, 2), (path.name, args, code, err)
    if code == 2:
        assert err.count("\n") == 1, (path.name, args, err)
        assert err.startswith(f"halo: error: {path}: "), (path.name, args, err)
    return code, err


def test_every_malformed_result_is_shown_or_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = corpus()
    directory = tmp_path / "results"
    directory.mkdir()
    refused = 0
    for name, text in files.items():
        path = directory / f"{name}.json"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        code, _ = one_line_or_shown(capsys, path, "results", "show", str(path))
        one_line_or_shown(capsys, path, "results", "show", str(path), "--json")
        made, _ = one_line_or_shown(
            capsys, path, "report", str(path), "-o", str(tmp_path / "r.html")
        )
        assert made == code, name  # both read the file through the same loader
        refused += code == 2
    # the unchanged results of every kind are shown; most of the rest are refused
    assert [
        halo(capsys, "results", "show", str(directory / f"{k}-good.json"))[0] for k in GOOD
    ] == [
        0,
        0,
        0,
        0,
    ]
    assert len(files) > 900 and refused > len(files) // 2, (len(files), refused)
    code, out, err = halo(capsys, "results", "list", "--dir", str(directory), "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == len(files) and err == ""
    assert all("\n" not in row.get("error", "") for row in rows)


def test_the_reasons_name_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = {
        "p50": (
            changed(net_result(), ("paths", 1, "latency_us", "p50"), "fast"),
            "not a complete halo.bench.net/1 result: paths[1].latency_us.p50 is 'fast', not a number",
        ),
        "nodes": (
            changed(tp_result(), ("nodes", "node1", "versions"), ["2.8"]),
            "not a complete halo.bench.tp/1 result: nodes.node1.versions is a list, not an object",
        ),
        "sweep": (
            changed(collective_result(), ("sweep", 3), None, delete=True)
            | {"sweep": [{"bytes": 8}]},
            "not a complete halo.bench.collective/1 result: sweep[0].algbw_gbs is missing",
        ),
        "kind": ({**net_result(), "kind": "tp"}, "kind is 'tp' in a halo.bench.net/1 result"),
    }
    for name, (data, reason) in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data))
        code, out, err = halo(capsys, "results", "show", str(path))
        assert (code, out, err) == (2, "", f"halo: error: {path}: {reason}\n")
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(net_result()).replace("68.0", "1e400"))
    assert halo(capsys, "results", "show", str(huge)) == (
        2,
        "",
        f"halo: error: {huge}: not JSON (number 1e400 is out of range)\n",
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sampled_from(sorted(GOOD)), st.data())
def test_any_value_anywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, data: st.DataObject
) -> None:
    good = GOOD[kind]()
    where = data.draw(st.sampled_from(list(paths(good))))
    value = data.draw(json_values)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(changed(good, where, value)))  # NaN, huge ints: as Python writes
    one_line_or_shown(capsys, path, "results", "show", str(path))
    one_line_or_shown(capsys, path, "report", str(path), "-o", str(tmp_path / "r.html"))
