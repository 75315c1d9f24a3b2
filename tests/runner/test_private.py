"""What halo leaves on a node is private to the user it runs as (issue 29: with [ray]
auth = "none" the node state directory was 0755 and the engine log 0644): the state and
bench job directories are 0700 and the logs, pid and token files 0600, whatever the umask
and the auth, older ones tightened; a directory that is a link or another user's stops the
script in one line. Through a real ``bash -s``."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from halo_cluster.engines.scripts import background_script
from halo_cluster.runner.quote import RAY_TOKEN_ENV, private_dir, private_files

OTHER_UID = 12345


def bash(script: str, home: Path, umask: int = 0o022) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    return subprocess.run(
        ["bash", "-c", f"umask {umask:03o}\n{script}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.parametrize("token", [None, "s3cret"], ids=["auth none", "auth token"])
@pytest.mark.parametrize("umask", [0o022, 0o002, 0o000])
def test_the_engine_state_and_log_are_private_whatever_the_auth(
    token: str | None, umask: int, tmp_path: Path
) -> None:
    env = {"HALO_X": "1", **({RAY_TOKEN_ENV: token} if token else {})}
    done = bash(background_script(env, ["true"], "lab"), tmp_path, umask)
    assert done.returncode == 0, done.stderr
    state = tmp_path / ".local" / "state" / "halo"
    found = {p.name: mode(p) for p in state.iterdir()}
    tokens = {p.name: 0o600 for p in state.glob("ray-*.token")}
    assert (mode(state), found) == (
        0o700,
        {"serve-lab.log": 0o600, "serve-lab.pid": 0o600, "serve-lab.since": 0o600, **tokens},
    )
    assert len(tokens) == (1 if token else 0)


def test_an_older_open_state_directory_and_log_are_tightened(tmp_path: Path) -> None:
    state = tmp_path / ".local" / "state" / "halo"
    state.mkdir(parents=True, mode=0o755)
    state.chmod(0o755)
    (state / "serve-lab.log").write_text("the last run's log\n")
    (state / "serve-lab.log").chmod(0o644)
    done = bash(background_script({}, ["true"], "lab"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert (mode(state), mode(state / "serve-lab.log"), mode(state / "serve-lab.pid")) == (
        0o700,
        0o600,
        0o600,
    )


def test_private_files_keep_their_content(tmp_path: Path) -> None:
    kept = tmp_path / "a log"
    kept.write_text("kept\n")
    kept.chmod(0o666)
    made = tmp_path / "new"
    done = bash(private_files(f"'{kept}'", f"'{made}'"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert (kept.read_text(), mode(kept), made.read_text(), mode(made)) == (
        "kept\n",
        0o600,
        "",
        0o600,
    )


def test_a_directory_that_is_a_link_or_another_users_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    script = f"set -e\n{private_dir(repr(str(link)))}echo after\n"
    done = bash(script, tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        f"{link}: not a directory of this user's: refused\n",
    )
    assert mode(target) == 0o755  # not touched through the link
    if os.geteuid() != 0:
        return  # giving it to another user needs root
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    theirs.chmod(0o777)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    done = bash(f"set -e\n{private_dir(repr(str(theirs)))}echo after\n", tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        f"{theirs}: not a directory of this user's: refused\n",
    )
    assert (mode(theirs), theirs.stat().st_uid) == (0o777, OTHER_UID)
