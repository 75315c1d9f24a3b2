"""The one atomic write: all or nothing, final permissions, no temporary file left behind."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from halo_cluster.atomic import AtomicFile, atomic_write


def test_atomic_write_replaces_with_the_mode_asked(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")
    atomic_write(path, "new", mode=0o644)
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["state.json"]


def test_without_a_mode_the_file_is_private(tmp_path: Path) -> None:
    atomic_write(tmp_path / "token", "secret\n", prefix=".token.")
    assert stat.S_IMODE((tmp_path / "token").stat().st_mode) == 0o600


def test_a_failed_write_keeps_the_old_content_and_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), AtomicFile(path) as handle:
        handle.write("half")
        raise RuntimeError("disk full")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["result.json"]


def test_creating_where_one_cannot_fails_at_construction(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        AtomicFile(tmp_path / "missing" / "file")


# -- write_output: a file someone named for output (halo report -o, --out) -------------------
def test_output_replaces_a_file_and_creates_its_directory(tmp_path: Path) -> None:
    from halo_cluster.atomic import write_output

    target = tmp_path / "new" / "r.html"
    assert write_output(target, "one") is False
    assert write_output(target, "two", mode=0o640) is False
    assert target.read_text() == "two" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert os.listdir(target.parent) == ["r.html"]


def test_output_through_a_link_keeps_the_link(tmp_path: Path) -> None:
    from halo_cluster.atomic import write_output

    real = tmp_path / "real.html"
    real.write_text("an older and longer page")
    link = tmp_path / "link.html"
    link.symlink_to(real)
    assert write_output(link, "page") is False
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "page"  # written in place, the old tail cut off


def test_output_refuses_what_is_not_a_file(tmp_path: Path) -> None:
    from halo_cluster.atomic import write_output
    from halo_cluster.errors import UsageError

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    links = {
        "to-null": "/dev/null",
        "to-fifo": str(fifo),
        "to-dir": str(tmp_path),
        "gone": "/nonexistent",
    }
    for name, target in links.items():
        (tmp_path / name).symlink_to(target)
    expected = {
        fifo: f"{fifo}: not a regular file; give the path of a file to write",
        tmp_path: f"{tmp_path}: not a regular file; give the path of a file to write",
        Path("/dev/null"): "/dev/null: not a regular file; give the path of a file to write",
        **{
            tmp_path
            / name: f"{tmp_path / name}: not a regular file; give the path of a file to write"
            for name in ("to-null", "to-fifo", "to-dir")
        },
        tmp_path
        / "gone": f"{tmp_path / 'gone'}: a link to nothing; give the path of a file to write",
        tmp_path / "file" / "x": f"cannot write {tmp_path / 'file' / 'x'}: Not a directory",
    }
    (tmp_path / "file").write_text("")
    got = {}
    for path in expected:
        with pytest.raises(UsageError) as err:
            write_output(path, "never")
        got[path] = str(err.value)
    assert got == expected
    assert all((tmp_path / name).is_symlink() for name in links)
    assert not Path("/nonexistent").exists()


SRC = str(Path(__file__).resolve().parent.parent / "src")  # this checkout's, from any cwd


def run_report(args: list[str], stdout: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "halo_cluster", "report", *args],
        env={**os.environ, "PYTHONPATH": SRC},
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def test_report_to_its_own_stdout_link_keeps_the_link(tmp_path: Path) -> None:
    """#11: ``halo report -o /dev/stdout > file`` renamed over the system's /dev/stdout link.
    The same link, made here (``/proc/self/fd/1``), so a regression cannot touch /dev."""
    result = tmp_path / "r.json"
    result.write_text('{"schema": "halo.bench.net/1", "kind": "net", "paths": []}')
    (tmp_path / "stdout").symlink_to("/proc/self/fd/1")
    page = tmp_path / "page.html"
    with page.open("w") as out:
        done = run_report(["r.json", "-o", "stdout"], out, tmp_path)
    assert (done.returncode, done.stderr) == (0, "wrote stdout from 1 result(s)\n")
    assert (tmp_path / "stdout").is_symlink() and os.path.islink("/dev/stdout")
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.endswith("</html>\n")
    with page.open("a") as out:  # >> file: appended after what was there
        assert run_report(["r.json", "-o", "stdout"], out, tmp_path).returncode == 0
    assert page.read_text() == text * 2
    piped = run_report(["r.json", "-o", "stdout"], subprocess.PIPE, tmp_path)
    assert (piped.returncode, piped.stdout) == (2, "")
    assert (
        piped.stderr
        == "halo: error: stdout: not a regular file; give the path of a file to write\n"
    )


def test_report_where_another_user_cannot_write_is_one_line(tmp_path: Path) -> None:
    """#11: as another user, ``-o /root/x.html`` was a PermissionError traceback. Root here
    loses the capabilities that let it write anywhere (setpriv), and the directory is another
    user's, as /root is to everyone else."""
    import shutil

    result = tmp_path / "r.json"
    result.write_text('{"schema": "halo.bench.net/1", "kind": "net", "paths": []}')
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv cannot be another user here")
        os.chown(locked, 65534, 65534)
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    else:
        locked.chmod(0o500)
    target = locked / "x.html"
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "halo_cluster", "report", str(result), "-o", str(target)],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"halo: error: cannot write {target}: Permission denied\n"
