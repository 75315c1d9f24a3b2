"""The node-code cache is as trusted as the zipapp (issue 29, N2), with real interpreters
(this machine's Python and the real CPython 3.9): every compiled entry carries the sha256 of
the source it was compiled from (out of the checked zipapp) and of its code, and lives in a
directory BOOT checked is this user's; a damaged entry is compiled again (c), an entry
another user planted is never run (a), a cache directory or file another user owns or can
write is refused with one line naming it and the fix (b), and a FIFO, a device, a link or a
huge file in the cache neither hangs nor fills the memory."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from halo_cluster.nodecode import (
    MAX_CODE,
    UNSAFE,
    NodeCode,
    Problem,
    node_code,
    problem,
    refused_path,
)
from halo_cluster.runner.local import LocalRunner
from halo_cluster.runner.node_code import NodeRunner
from halo_cluster.runner.result import Result
from tests.test_nodecode import cache, cached, node_info, outcome, python  # noqa: F401

OTHER_UID = 12345  # a user that is not this one
HEADER = 64  # sha256 of the source, sha256 of the code

# The compiled entry a planter would write: the real module's key, the planted code's
# digest, the planted code (marshalled by the node's own Python: the format is its own).
PLANT = """\
import hashlib, marshal, sys
real, planted = sys.stdin.buffer.read().split(b"\\0", 1)
data = marshal.dumps(compile(planted, "planted", "exec"))
sys.stdout.buffer.write(hashlib.sha256(real).digest() + hashlib.sha256(data).digest() + data)
"""


def compiled_dir(code: NodeCode, cache: Path, py: str) -> Path:  # noqa: F811
    tag = subprocess.run(
        [py, "-c", "import sys; print(sys.implementation.cache_tag)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return cache / f"node-{code.digest}.{tag}"


def sources(code: NodeCode) -> dict[str, bytes]:
    """Each module's source in the zipapp, by the name of its compiled entry."""
    with zipfile.ZipFile(io.BytesIO(code.data)) as archive:
        out = {}
        for name in archive.namelist():
            if name.startswith("halo_cluster/"):
                module = name[: -len(".py")].removesuffix("/__init__").replace("/", ".")
                out[f"{module}.bin"] = archive.read(name)
        return out


def valid(entry: bytes, source: bytes) -> bool:
    head, digest, data = entry[:32], entry[32:HEADER], entry[HEADER:]
    return head == hashlib.sha256(source).digest() and digest == hashlib.sha256(data).digest()


def first_run(py: str, cache: Path) -> tuple[NodeCode, Path]:  # noqa: F811
    """The code sent and run once: the zipapp and its compiled entries are in the cache."""
    code = node_code()
    runner = NodeRunner(LocalRunner(), py, code)
    assert runner.run(code.argv(py, ["node-info"])).ok
    return code, compiled_dir(code, cache, py)


def run(code: NodeCode, py: str) -> Result:
    """One node command, with a timeout that a hang would reach."""
    return NodeRunner(LocalRunner(), py, code).run(code.argv(py, ["node-info"]), timeout=60)


def planted(py: str, real: bytes, marker: Path) -> bytes:
    """The module's own code, after a line that writes ``marker``."""
    body = f"open({str(marker)!r}, 'w').write('ran')\n".encode() + real
    done = subprocess.run([py, "-c", PLANT], input=real + b"\0" + body, capture_output=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


# -- the entries -----------------------------------------------------------------------------


def test_each_compiled_entry_carries_its_source_and_code_digests(
    python: tuple[str, str],  # noqa: F811
    cache: Path,  # noqa: F811
) -> None:
    py, _version = python
    code, compiled = first_run(py, cache)
    known = sources(code)
    entries = {e.name: e for e in compiled.iterdir()}
    assert "halo_cluster.node.main.bin" in entries
    assert {name: valid(e.read_bytes(), known[name]) for name, e in entries.items()} == {
        name: True for name in entries
    }
    modes = {stat.S_IMODE(e.stat().st_mode) for e in entries.values()}
    assert (stat.S_IMODE(compiled.stat().st_mode), modes) == (0o700, {0o600})


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x20]) + data[at + 1 :]


DAMAGE = {
    "a byte of the source key": lambda e: flip(e, 3),
    "a byte of the code digest": lambda e: flip(e, 40),
    "a byte of the code": lambda e: flip(e, len(e) - 20),
    "a string constant changed": lambda e: e.replace(b"node-info", b"node/info", 1),
    "truncated": lambda e: e[: len(e) // 2],
    "empty": lambda e: b"",
    "the old format (16 bytes of key, then the code)": lambda e: e[:16] + e[HEADER:],
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_compiled_entry_is_compiled_again(
    damage: str,
    python: tuple[str, str],  # noqa: F811
    cache: Path,  # noqa: F811
) -> None:
    """N2 (c): one flipped byte past the key broke the node for good ('unexpected keyword
    argument 'c/ntainer''); now the entry does not match its digests and is compiled again."""
    py, version = python
    code, compiled = first_run(py, cache)
    name = "halo_cluster.node.handlers.bin"  # it names the command: "node-info"
    entry = compiled / name
    damaged = DAMAGE[damage](entry.read_bytes())
    assert damaged != entry.read_bytes()
    entry.write_bytes(damaged)
    assert outcome(run(code, py)) == (0, node_info(version), "")
    assert valid(entry.read_bytes(), sources(code)[name])


# -- planted entries -------------------------------------------------------------------------


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")


def plant(py: str, code: NodeCode, compiled: Path, marker: Path) -> Path:
    """A working entry for the package itself that writes ``marker`` when run."""
    entry = compiled / "halo_cluster.bin"
    real = sources(code)["halo_cluster.bin"]
    entry.write_bytes(planted(py, real, marker))
    entry.chmod(0o600)
    return entry


def test_a_compiled_entry_of_this_user_runs_the_control(
    python: tuple[str, str],  # noqa: F811
    cache: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The control for the tests below: a planted entry this user wrote, with the right
    digests, does run (whoever can write as this user can change what it runs anyway)."""
    py, version = python
    code, compiled = first_run(py, cache)
    marker = tmp_path / "ran"
    plant(py, code, compiled, marker)
    assert (outcome(run(code, py)), marker.read_text()) == ((0, node_info(version), ""), "ran")


def test_an_entry_another_user_planted_is_never_run(
    python: tuple[str, str],  # noqa: F811
    cache: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """N2 (a): an entry owned by another user (put there while the directory was theirs, or
    writable) is compiled again and replaced, never run."""
    needs_root()
    py, version = python
    code, compiled = first_run(py, cache)
    marker = tmp_path / "ran"
    entry = plant(py, code, compiled, marker)
    os.chown(entry, OTHER_UID, OTHER_UID)
    assert (outcome(run(code, py)), marker.exists()) == ((0, node_info(version), ""), False)
    assert entry.stat().st_uid == os.geteuid()
    assert valid(entry.read_bytes(), sources(code)["halo_cluster.bin"])


def refusal(path: Path, how: str) -> str:
    if how == "owner":
        me = os.geteuid()
        return (
            f"{path} is owned by uid {OTHER_UID}, not by this user (uid {me}): refused; "
            f"remove it or chown it to uid {me}"
        )
    mode = stat.S_IMODE(path.stat().st_mode) & 0o777
    return f"{path} is writable by group or others (mode {mode:03o}): refused; chmod go-w it"


@pytest.mark.parametrize("where", ["cache directory", "zipapp", "compiled directory"])
@pytest.mark.parametrize(("how", "mode"), [("owner", None), ("mode", 0o777), ("mode", 0o620)])
def test_a_cache_another_user_can_change_is_refused_in_one_line(
    where: str,
    how: str,
    mode: int | None,
    python: tuple[str, str],  # noqa: F811
    cache: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """N2 (b): with ~/.cache/halo owned by another user, that user's code ran as root. Now
    the directory, the zipapp or the compiled directory that another user owns or can write
    is refused (nothing from it runs), with the path and the fix; the doctor shows it."""
    py, _version = python
    code, compiled = first_run(py, cache)
    marker = tmp_path / "ran"
    plant(py, code, compiled, marker)
    target = {
        "cache directory": cache,
        "zipapp": cached(code, cache),
        "compiled directory": compiled,
    }[where]
    if how == "owner":
        needs_root()
        os.chown(target, OTHER_UID, OTHER_UID)
    else:
        assert mode is not None
        target.chmod(mode if where == "zipapp" else mode | 0o700)
    detail = refusal(target, how)
    runner = NodeRunner(LocalRunner(), py, code)
    result = runner.run(code.argv(py, ["node-info"]))
    assert (outcome(result), runner.sent, marker.exists()) == (
        (UNSAFE, "", f"halo-node: {detail}\n"),
        False,
        False,
    )
    found = problem(result.returncode, result.stderr)
    assert (found, refused_path(found) if found else None) == (
        Problem("cache-unsafe", detail),
        str(target),
    )


def test_install_into_a_cache_directory_others_can_write_is_refused(
    cache: Path,  # noqa: F811
) -> None:
    code = node_code()
    cache.mkdir(mode=0o700)
    cache.chmod(0o777)
    result = LocalRunner().run(code.install_argv(sys.executable), code.payload())
    assert outcome(result) == (UNSAFE, "", f"halo-node: {refusal(cache, 'mode')}\n")
    assert list(cache.iterdir()) == []


# -- what is not a regular file, or too big ----------------------------------------------------


def make(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "a /dev/zero device":
        needs_root()
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    elif kind == "directory":
        path.mkdir()
    else:  # a sparse file far over the bound
        with path.open("wb") as out:
            out.truncate(MAX_CODE * 64)


KINDS = ["fifo", "link to /dev/zero", "a /dev/zero device", "directory", "huge sparse file"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_zipapp_as_anything_but_a_file_never_hangs(
    kind: str,
    python: tuple[str, str],  # noqa: F811
    cache: Path,  # noqa: F811
) -> None:
    """Not read (a FIFO would block, /dev/zero never ends), removed and sent again; a
    directory that cannot be replaced is one line."""
    py, version = python
    code = node_code()
    cache.mkdir(mode=0o700)
    make(kind, cached(code, cache))
    result = run(code, py)
    if kind == "directory":
        detail = f"cannot cache halo's node code in {cache}: Is a directory"
        assert outcome(result) == (96, "", f"halo-node: {detail}\n")
        return
    assert outcome(result) == (0, node_info(version), "")
    assert cached(code, cache).read_bytes() == code.data


@pytest.mark.parametrize("kind", KINDS)
def test_a_compiled_entry_as_anything_but_a_file_never_hangs(
    kind: str,
    python: tuple[str, str],  # noqa: F811
    cache: Path,  # noqa: F811
) -> None:
    py, version = python
    code, compiled = first_run(py, cache)
    name = "halo_cluster.node.main.bin"
    entry = compiled / name
    entry.unlink()
    make(kind, entry)
    assert outcome(run(code, py)) == (0, node_info(version), "")
    if kind == "directory":  # cannot be replaced: compiled in memory each time
        assert entry.is_dir()
        return
    assert entry.is_file() and not entry.is_symlink()
    assert valid(entry.read_bytes(), sources(code)[name])
