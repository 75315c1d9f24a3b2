"""halo's node code (nodecode, runner.node_code) with real interpreters: the zipapp is the
same bytes for the same files, is sent once and cached 0600 by its hash, a copy that does not
match is never run, and each way a node cannot run it (no python, an old one, a cache that
cannot be written) comes back as the Problem the doctor shows.

Every test points XDG_CACHE_HOME at its own tmp_path (the children inherit it): nothing here
touches the real ~/.cache."""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster import __version__
from halo_cluster.nodecode import (
    CANNOT_CACHE,
    MISSING,
    TOO_OLD,
    UNSAFE,
    ZIP_MAIN,
    NodeCode,
    Problem,
    as_halo,
    boot,
    build,
    is_missing,
    node_code,
    old_version,
    package_files,
    problem,
)
from halo_cluster.runner.local import LocalRunner
from halo_cluster.runner.node_code import NodeRunner
from halo_cluster.runner.prefix import PrefixRunner
from halo_cluster.runner.result import Result
from tests.conftest import python39

ZIP_TIME = (1980, 1, 1, 0, 0, 0)


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="session", params=["this", "3.9"])
def python(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(interpreter, its version): this machine's Python and the real CPython 3.9. Session
    scope: resolved before ``cache`` moves XDG_CACHE_HOME (python39() looks there)."""
    if request.param == "this":
        return sys.executable, platform.python_version()
    path = python39()
    found = re.search(r"python-(3\.9\.\d+)-", path)
    assert found, path
    return path, found.group(1)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The node's cache directory (XDG_CACHE_HOME/halo), inside this test's tmp_path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "halo"


def cached(code: NodeCode, cache: Path) -> Path:
    return cache / f"node-{code.digest}.pyz"


def evil(marker: Path) -> bytes:
    """A zipapp whose node code (and package) write ``marker`` when imported."""
    write = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
    return build(
        [
            ("halo_cluster/__init__.py", write.encode()),
            ("halo_cluster/node/__init__.py", write.encode()),
            (
                "halo_cluster/node/main.py",
                (write + "def main(argv=None):\n    return 0\n").encode(),
            ),
        ]
    )


def node_info(version: str) -> dict[str, str]:
    return {"halo": __version__, "python": version}


def outcome(result: Result) -> tuple[int, object, str]:
    """(exit code, stdout as JSON when it is JSON, stderr)."""
    try:
        out: object = json.loads(result.stdout)
    except ValueError:
        out = result.stdout
    return result.returncode, out, result.stderr


# -- the zipapp ----------------------------------------------------------------------------


def test_the_build_is_deterministic_and_its_hash_follows_the_files() -> None:
    files = package_files()
    first, second = build(files), build(package_files())
    assert first == second
    changed = [
        (name, data + b"# changed\n" if name.endswith("/node/main.py") else data)
        for name, data in files
    ]
    assert changed != files
    assert NodeCode(build(changed)).digest != NodeCode(first).digest
    assert NodeCode(first).digest == hashlib.sha256(first).hexdigest()


def test_the_archive_holds_the_node_side_only_with_fixed_timestamps() -> None:
    files = package_files()
    with zipfile.ZipFile(io.BytesIO(build(files))) as archive:
        entries = {
            info.filename: (info.date_time, info.external_attr >> 16, archive.read(info))
            for info in archive.infolist()
        }
        order = archive.namelist()
    assert entries == {
        "__main__.py": (ZIP_TIME, 0o644, ZIP_MAIN.encode()),
        **{name: (ZIP_TIME, 0o644, data) for name, data in files},
    }
    assert order[0] == "__main__.py"
    assert "halo_cluster/node/main.py" in entries
    assert "halo_cluster/__init__.py" in entries
    controller = ("cli", "lab", "cluster", "serving", "ray", "supervise", "models", "capacity")
    outside = [
        name
        for name in entries
        if name.startswith(tuple(f"halo_cluster/{part}/" for part in controller))
        or "__pycache__" in name
    ]
    assert outside == []


def test_package_files_are_what_the_entry_point_imports(tmp_path: Path) -> None:
    """The entry point, what it imports at the top, inside a function and through
    ``from pkg import module``, and the packages of each; not what only the type checker
    reads, nor anything no import reaches."""
    pkg = tmp_path / "pkg"
    for rel, text in {
        "__init__.py": "top",
        "node/__init__.py": "",
        "node/main.py": (
            "from typing import TYPE_CHECKING\nimport pkg.wire.args\nfrom pkg import units\n"
            "if TYPE_CHECKING:\n    from pkg.cli import main\n"
            "def run():\n    from pkg.facts.root import Root\n"
        ),
        "wire/__init__.py": "",
        "wire/args.py": "from pkg.errors import Oops\n",
        "errors.py": "class Oops(Exception): pass\n",
        "units.py": "",
        "facts/__init__.py": "",
        "facts/root.py": "",
        "cli/__init__.py": "main = 1\n",
        "lab/lab.py": "lab",
        "__pycache__/a.py": "cache",
        "data/readme.txt": "not python",
    }.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert [name for name, _data in package_files(pkg)] == [
        "pkg/__init__.py",
        "pkg/errors.py",
        "pkg/facts/__init__.py",
        "pkg/facts/root.py",
        "pkg/node/__init__.py",
        "pkg/node/main.py",
        "pkg/units.py",
        "pkg/wire/__init__.py",
        "pkg/wire/args.py",
    ]


# -- sent once, then only the hash -----------------------------------------------------------


def test_sent_once_cached_0600_then_only_the_hash(python: tuple[str, str], cache: Path) -> None:
    py, version = python
    code = node_code()
    first = NodeRunner(LocalRunner(), py, code)
    assert (outcome(first.run(code.argv(py, ["node-info"]))), first.sent) == (
        (0, node_info(version), ""),
        True,
    )
    path = cached(code, cache)  # XDG_CACHE_HOME reached the child: the code is here
    # the code, and its modules compiled for this Python (keyed by each source's sha256)
    tag = path.name[: -len(".pyz")] + ".cpython-" + "".join(version.split(".")[:2])
    assert sorted(os.listdir(cache)) == sorted([path.name, tag])
    assert (path.stat().st_mode & 0o777, path.read_bytes()) == (0o600, code.data)
    assert cache.stat().st_mode & 0o777 == 0o700
    again = NodeRunner(LocalRunner(), py, code)
    assert (outcome(again.run(code.argv(py, ["node-info"]))), again.sent) == (
        (0, node_info(version), ""),
        False,
    )


def test_boot_alone_refuses_a_missing_or_corrupted_copy_and_deletes_it(
    python: tuple[str, str], cache: Path, tmp_path: Path
) -> None:
    py, _version = python
    code = node_code()
    line = f"halo-node: halo's node code {code.digest[:12]} is not cached here\n"
    missing = LocalRunner().run(code.argv(py, ["node-info"]))
    assert outcome(missing) == (MISSING, "", line)
    assert is_missing(missing.returncode, missing.stderr)
    cache.mkdir()
    marker = tmp_path / "marker"
    cached(code, cache).write_bytes(evil(marker))
    corrupt = LocalRunner().run(code.argv(py, ["node-info"]))
    assert (outcome(corrupt), marker.exists(), cached(code, cache).exists()) == (
        (MISSING, "", line),
        False,
        False,
    )


def test_a_corrupted_copy_is_never_run_and_is_replaced(
    python: tuple[str, str], cache: Path, tmp_path: Path
) -> None:
    py, version = python
    code = node_code()
    cache.mkdir()
    # control: the impostor does write its marker when run under its own hash
    control_marker = tmp_path / "control"
    impostor = evil(control_marker)
    (cache / f"node-{NodeCode(impostor).digest}.pyz").write_bytes(impostor)
    control = LocalRunner().run(NodeCode(impostor).argv(py, ["node-info"]))
    assert (control.returncode, control_marker.read_text()) == (0, "ran")

    marker = tmp_path / "marker"
    cached(code, cache).write_bytes(evil(marker))
    runner = NodeRunner(LocalRunner(), py, code)
    result = runner.run(code.argv(py, ["node-info"]))
    assert (outcome(result), runner.sent, marker.exists()) == (
        (0, node_info(version), ""),
        True,
        False,
    )
    assert cached(code, cache).read_bytes() == code.data


def test_a_script_naming_the_code_runs_after_ensure(python: tuple[str, str], cache: Path) -> None:
    py, version = python
    code = node_code()
    script = "set -e\n" + shlex.join(code.argv(py, ["node-info"])) + "\n"
    runner = NodeRunner(LocalRunner(), py, code)
    assert (outcome(runner.run(["bash", "-s"], script)), runner.sent) == (
        (0, node_info(version), ""),
        True,
    )
    assert cached(code, cache).read_bytes() == code.data
    again = NodeRunner(LocalRunner(), py, code)
    assert (outcome(again.run(["bash", "-s"], script)), again.sent) == (
        (0, node_info(version), ""),
        False,
    )


def test_a_script_not_naming_the_code_passes_straight_through(cache: Path) -> None:
    code = node_code()
    runner = NodeRunner(LocalRunner(), sys.executable, code)
    assert (outcome(runner.run(["bash", "-s"], "echo hi\n")), runner.sent, cache.exists()) == (
        (0, "hi\n", ""),
        False,
        False,
    )


def test_a_failed_ensure_stops_the_script_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    code = node_code()
    marker = tmp_path / "script-ran"
    script = f"touch {shlex.quote(str(marker))}\n" + shlex.join(
        code.argv(sys.executable, ["node-info"])
    )
    runner = NodeRunner(LocalRunner(), sys.executable, code)
    result = runner.run(["bash", "-s"], script + "\n")
    detail = f"cannot cache halo's node code in {blocker}/halo: Not a directory"
    assert (outcome(result), runner.sent, marker.exists()) == (
        (CANNOT_CACHE, "", f"halo-node: {detail}\n"),
        False,
        False,
    )
    assert problem(result.returncode, result.stderr) == Problem("cache", detail)


# -- what a node without a usable python or cache shows --------------------------------------


def test_a_python_older_than_the_minimum(python: tuple[str, str], cache: Path) -> None:
    py, version = python
    code = node_code()
    major, minor = (int(n) for n in version.split(".")[:2])
    wanted = (major, minor + 1)
    argv = [py, "-c", boot(minimum=wanted), code.digest, "node-info"]
    result = LocalRunner().run(argv)
    detail = f"python {version} is older than {major}.{minor + 1}"
    assert outcome(result) == (TOO_OLD, "", f"halo-node: {detail}\n")
    found = problem(result.returncode, result.stderr)
    assert found == Problem("python-old", detail)
    assert old_version(found) == version
    assert not cache.exists()  # refused before anything else


def test_boot_minimum_3_99_on_this_python(cache: Path) -> None:
    result = LocalRunner().run([sys.executable, "-c", boot(minimum=(3, 99)), "0" * 64, "node-info"])
    v = platform.python_version()
    assert outcome(result) == (98, "", f"halo-node: python {v} is older than 3.99\n")
    found = problem(result.returncode, result.stderr)
    assert (found, old_version(found) if found else None) == (
        Problem("python-old", f"python {v} is older than 3.99"),
        v,
    )


@pytest.mark.parametrize(
    ("prefix", "interpreter", "detail"),
    [
        ((), "/nonexistent/python3", "/nonexistent/python3: No such file or directory"),
        ((), "halo-no-such-python3", "halo-no-such-python3: command not found"),
        (
            ("env", "PATH=/x"),
            "/nonexistent/python3",
            "env: '/nonexistent/python3': No such file or directory",
        ),
    ],
)
def test_a_missing_python(
    prefix: tuple[str, ...],
    interpreter: str,
    detail: str,
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the node's shell says it: 127 and the last line (a real node answers through ssh's
    shell, which gives 127 for a missing interpreter, with or without a slash)."""
    monkeypatch.setenv("LC_ALL", "C")
    code = node_code()
    runner = NodeRunner(PrefixRunner(LocalRunner(), prefix), interpreter, code)
    result = runner.run(code.argv(interpreter, ["node-info"]))
    assert (result.returncode, problem(result.returncode, result.stderr), runner.sent) == (
        127,
        Problem("python-missing", detail),
        False,
    )


def test_a_cache_directory_that_cannot_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    code = node_code()
    runner = NodeRunner(LocalRunner(), sys.executable, code)
    result = runner.run(code.argv(sys.executable, ["node-info"]))
    detail = f"cannot cache halo's node code in {blocker}/halo: Not a directory"
    assert (outcome(result), runner.sent) == ((CANNOT_CACHE, "", f"halo-node: {detail}\n"), False)
    assert problem(result.returncode, result.stderr) == Problem("cache", detail)
    assert blocker.read_text() == "in the way"


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """mount(options) -> a fresh tmpfs under tmp_path (root only; skipped where mount is not
    allowed); unmounted afterwards."""
    mounted: list[Path] = []

    def mount(options: str) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        target = tmp_path / f"mnt{len(mounted)}"
        target.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"mount is not permitted here: {done.stderr.strip()}")
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", str(target)], check=False)


@pytest.mark.parametrize(
    ("options", "reason", "prepare"),
    [
        ("ro,size=64k", "Read-only file system", False),
        ("size=16k", "No space left on device", True),
    ],
)
def test_a_read_only_or_full_cache(
    options: str,
    reason: str,
    prepare: bool,
    tmpfs: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = tmpfs(options)
    monkeypatch.setenv("XDG_CACHE_HOME", str(base))
    code = node_code()
    assert len(code.data) > 16 * 1024  # it cannot fit
    runner = NodeRunner(LocalRunner(), sys.executable, code)
    result = runner.run(code.argv(sys.executable, ["node-info"]))
    detail = f"cannot cache halo's node code in {base}/halo: {reason}"
    assert (outcome(result), runner.sent) == ((CANNOT_CACHE, "", f"halo-node: {detail}\n"), False)
    assert problem(result.returncode, result.stderr) == Problem("cache", detail)
    if prepare:  # the directory was made: no half-written temporary file is left there
        assert os.listdir(base / "halo") == []


def test_install_refuses_bytes_that_do_not_match_the_hash(cache: Path) -> None:
    code = node_code()
    result = LocalRunner().run(code.install_argv(sys.executable), NodeCode(b"other").payload())
    assert outcome(result) == (
        MISSING,
        "",
        "halo-node: the code received does not match its hash\n",
    )
    assert not cached(code, cache).exists()


# -- problem(), as_halo() --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("returncode", "stderr", "expected"),
    [
        (0, "", None),
        (
            98,
            "halo-node: python 3.8.10 is older than 3.9\n",
            Problem("python-old", "python 3.8.10 is older than 3.9"),
        ),
        (
            96,
            "noise\nhalo-node: cannot cache x: Read-only file system\n",
            Problem("cache", "cannot cache x: Read-only file system"),
        ),
        (
            97,
            "halo-node: halo's node code abc is not cached here\n",
            Problem("code", "halo's node code abc is not cached here"),
        ),
        (
            95,
            "halo-node: /root/.cache/halo is writable by group or others (mode 777): refused; "
            "chmod go-w it\n",
            Problem(
                "cache-unsafe",
                "/root/.cache/halo is writable by group or others (mode 777): refused; "
                "chmod go-w it",
            ),
        ),
        (95, "another program's exit 95\n", None),
        (97, "another program's exit 97\n", None),
        (98, "", None),
        (1, "halo-node: python 3.8.10 is older than 3.9\n", None),
        (127, "", Problem("python-missing", "command not found")),
        (
            127,
            "bash: line 1: python3: command not found\n\n",
            Problem("python-missing", "bash: line 1: python3: command not found"),
        ),
    ],
)
def test_problem_table(returncode: int, stderr: str, expected: Problem | None) -> None:
    assert problem(returncode, stderr) == expected


@given(st.integers(-300, 300), st.text())
def test_problem_never_raises_and_follows_the_exit_codes(returncode: int, stderr: str) -> None:
    found = problem(returncode, stderr)
    kinds = {
        TOO_OLD: "python-old",
        CANNOT_CACHE: "cache",
        UNSAFE: "cache-unsafe",
        MISSING: "code",
        127: "python-missing",
    }
    assert found is None or found.kind == kinds[returncode]
    assert found is None or "\n" not in found.detail


def test_as_halo() -> None:
    code = node_code()
    argv = code.argv("python3", ["inventory", "--json"])
    assert as_halo(tuple(argv)) == ("halo", "inventory", "--json")
    assert as_halo(("env", "PATH=/x", *argv)) == ("env", "PATH=/x", "halo", "inventory", "--json")
    assert as_halo(tuple(code.argv("python3", []))) == ("halo",)
    assert as_halo(tuple(code.install_argv("/usr/bin/python3"))) == ("halo", "--install")
    for unrelated in (
        ("bash", "-s"),
        ("python3", "-c", "print(1)", "a" * 64, "x"),
        ("python3", "-c", boot(), "not-a-hash", "node-info"),
        ("python3", "-c", boot()),
        (),
    ):
        assert as_halo(unrelated) == unrelated


words = st.lists(st.text(max_size=12), max_size=5).map(tuple)


@given(words, words)
def test_as_halo_keeps_any_prefix_and_arguments(
    prefix: tuple[str, ...], args: tuple[str, ...]
) -> None:
    code = node_code()
    assert as_halo((*prefix, *args)) == (*prefix, *args)
    assert as_halo((*prefix, *code.argv("python3", list(args)))) == (*prefix, "halo", *args)


# -- the zipapp run directly (the exporter's unit) --------------------------------------------


def test_the_zipapp_run_directly(python: tuple[str, str], cache: Path, tmp_path: Path) -> None:
    py, version = python
    code = node_code()
    cache.mkdir()
    path = cached(code, cache)
    path.write_bytes(code.data)
    assert outcome(LocalRunner().run([py, str(path), "node-info"])) == (0, node_info(version), "")

    renamed = tmp_path / "halo-node.pyz"
    renamed.write_bytes(code.data)
    assert outcome(LocalRunner().run([py, str(renamed), "node-info"])) == (
        97,
        "",
        f"halo-node: {renamed} does not match its hash: not run\n",
    )

    marker = tmp_path / "marker"
    other = tmp_path / "other"
    other.mkdir()
    impostor = other / path.name  # the right name, other bytes (with the same __main__)
    impostor.write_bytes(evil(marker))
    assert (outcome(LocalRunner().run([py, str(impostor), "node-info"])), marker.exists()) == (
        (97, "", f"halo-node: {impostor} does not match its hash: not run\n"),
        False,
    )
    # control: under its own hash the impostor runs (and writes its marker)
    honest = other / f"node-{NodeCode(impostor.read_bytes()).digest}.pyz"
    honest.write_bytes(impostor.read_bytes())
    assert LocalRunner().run([py, str(honest), "node-info"]).returncode == 0
    assert marker.read_text() == "ran"


def test_the_controller_keeps_its_build_and_rebuilds_a_damaged_one(tmp_path: Path) -> None:
    from halo_cluster import nodecode

    built = nodecode.NodeCode(nodecode.build(nodecode.package_files()))
    nodecode.node_code.cache_clear()
    first = nodecode.node_code(tmp_path)
    [kept] = list(tmp_path.glob("controller-*.b64"))
    assert (first.digest, kept.read_text().split("\n")[0]) == (built.digest, built.digest)
    nodecode.node_code.cache_clear()
    assert nodecode.node_code(tmp_path).data == built.data  # read back, not rebuilt
    kept.write_text(built.digest + "\n" + "QUJD")  # the wrong bytes under the right digest
    nodecode.node_code.cache_clear()
    assert nodecode.node_code(tmp_path).data == built.data
    assert kept.read_text() == f"{built.digest}\n{built.payload()}"
    nodecode.node_code.cache_clear()


def test_a_damaged_copy_in_a_directory_it_cannot_change_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root, permissions do not stop it: a read-only tmpfs holds the damaged copy."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    code = node_code()
    cache = tmp_path / "halo"
    cache.mkdir()
    (cache / f"node-{code.digest}.pyz").write_bytes(b"damaged")
    mounted = subprocess.run(
        ["mount", "--bind", "-o", "ro", str(cache), str(cache)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"mount not permitted: {mounted.stderr.strip()}")
    subprocess.run(["mount", "-o", "remount,bind,ro", str(cache)], check=False)
    try:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        done = LocalRunner().run(code.argv(sys.executable, ["node-info"]))
        assert (done.returncode, done.stderr) == (
            97,
            f"halo-node: halo's node code {code.digest[:12]} is not cached here\n",
        )
        installed = NodeRunner(LocalRunner(), sys.executable, code).run(
            code.argv(sys.executable, ["node-info"])
        )
        assert installed.returncode == 96 and "Read-only file system" in installed.stderr
    finally:
        subprocess.run(["umount", str(cache)], check=False)
