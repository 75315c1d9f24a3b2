"""SSHRunner's argv and the one shared SSH connection per node (runner.sharing): the user's
ssh config wins, the control directory is private, close_connections ends only halo's."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from halo_cluster.runner import sharing as runner_module
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.result import Result
from halo_cluster.runner.sharing import (
    CONTROL_PERSIST_S,
    close_connections,
    control_dir,
    sharing_config,
)
from halo_cluster.runner.ssh import SSHRunner

USER_CONFIG = """\
Host own
  HostName 192.0.2.1
  ControlMaster auto
  ControlPath /tmp/own-%C
Host optout
  HostName 192.0.2.2
  ControlMaster no
  ControlPath none
Host plain
  HostName 192.0.2.3
  User operator
"""


@pytest.fixture
def shared_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """halo's control directory in a temporary place, and no generated config remembered.
    A short path of its own: a socket's path must fit in 108 bytes, and a parallel run's
    tmp_path (under its worker's directory) is longer than that with a 40-character name."""
    directory = Path(tempfile.mkdtemp(prefix="halo-ctl-"))
    directory.chmod(0o700)
    monkeypatch.setattr(runner_module, "control_dir", lambda: directory)
    monkeypatch.setattr(runner_module, "_CONFIGS", {})
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def effective(config: Path, host: str, *options: str) -> dict[str, str]:
    """What ssh itself makes of a config for one host (``ssh -G``: no connection)."""
    out = subprocess.run(
        ["ssh", "-G", *options, "-F", str(config), "--", host],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    wanted = ("hostname", "user", "controlmaster", "controlpath", "controlpersist")
    return {k: v for k, _, v in (line.partition(" ") for line in out.splitlines()) if k in wanted}


def test_ssh_argv_shares_one_connection_per_node(tmp_path: Path, shared_dir: Path) -> None:
    user = tmp_path / "ssh_config"
    user.write_text(USER_CONFIG)
    config = sharing_config(user)
    assert config is not None and config.parent == shared_dir
    assert config.read_text() == (
        "# written by halo: your ssh config first (what it sets wins), then halo's defaults\n"
        f'Include "{user}"\n'
        "Host *\n"
        "  ControlMaster auto\n"
        f"  ControlPath {shared_dir}/%C\n"
        f"  ControlPersist {CONTROL_PERSIST_S}\n"
        "  ServerAliveInterval 5\n"
        "  ServerAliveCountMax 3\n"
    )
    assert config.stat().st_mode & 0o777 == 0o600
    runner = SSHRunner("root@node; rm -rf /", user, 7)
    assert runner.ssh_argv(["halo", "inventory", "--root", "/tmp/a b;$(x)"]) == [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=7",
        "-F",
        str(config),
        "--",
        "root@node; rm -rf /",
        "halo inventory --root '/tmp/a b;$(x)'",
    ]
    # a tunnel owns its connection: never through a master (its forward would outlive it)
    assert runner.ssh_options(tunnel=True) == [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=7",
        "-F",
        str(user),
        "-o",
        "ControlMaster=no",
        "-o",
        "ControlPath=none",
    ]
    # no command: a session or a tunnel (bench/endpoint.py builds its tunnels on these)
    assert runner.ssh_argv([])[:-3] == runner.ssh_options(tunnel=True)
    assert SSHRunner("h", user, share=False).ssh_argv(["true"]) == [
        *("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-F", str(user)),
        *("--", "h", "true"),
    ]


def test_the_users_ssh_config_wins(tmp_path: Path, shared_dir: Path) -> None:
    """ssh's own reading of the generated config: a host whose config shares connections
    keeps its own master (one per node), an explicit opt-out stays out, and the others
    share through halo's directory."""
    user = tmp_path / "ssh_config"
    user.write_text(USER_CONFIG)
    config = sharing_config(user)
    assert config is not None
    own, optout, plain = (effective(config, h) for h in ("own", "optout", "plain"))
    assert own["controlmaster"] == "auto" and own["controlpath"].startswith("/tmp/own-")
    assert optout == {  # (a ControlPersist without a master changes nothing)
        "user": "root",
        "hostname": "192.0.2.2",
        "controlmaster": "false",
        "controlpersist": "600",
    }
    assert plain["controlmaster"] == "auto" and plain["user"] == "operator"
    assert plain["controlpath"].startswith(f"{shared_dir}/") and plain["controlpersist"] == "600"
    assert len(plain["controlpath"].rsplit("/", 1)[1]) == 40  # %C
    tunnel = effective(config, "plain", "-o", "ControlMaster=no", "-o", "ControlPath=none")
    assert tunnel["controlmaster"] == "false" and "controlpath" not in tunnel


def test_configs_that_cannot_be_included_are_used_as_they_are(
    tmp_path: Path, shared_dir: Path
) -> None:
    odd = tmp_path / 'we"ird*'
    odd.write_text(USER_CONFIG)
    assert sharing_config(odd) is None
    assert SSHRunner("h", odd).ssh_argv(["true"])[5:7] == ["-F", str(odd)]
    missing = tmp_path / "missing"
    assert sharing_config(missing) is None  # ssh itself says that it is missing
    gone = tmp_path / "gone_config"
    gone.write_text("")
    first = sharing_config(gone)
    assert first is not None and first.exists()
    gone.unlink()
    runner_module._CONFIGS.clear()
    (tmp_path / "new_config").write_text("")
    assert sharing_config(tmp_path / "new_config") is not None
    assert not first.exists()  # a generated config whose ssh config is gone is pruned


def test_the_control_directory_is_private(tmp_path: Path) -> None:
    uid = os.geteuid()
    fresh = tmp_path / "a" / "ssh"
    assert runner_module._private_dir(fresh, uid)
    assert fresh.stat().st_mode & 0o777 == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o777)
    os.chmod(loose, 0o777)
    assert runner_module._private_dir(loose, uid) and loose.stat().st_mode & 0o777 == 0o700
    link = tmp_path / "link"
    link.symlink_to(fresh)
    assert not runner_module._private_dir(link, uid)  # a link is never trusted
    if uid == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        assert not runner_module._private_dir(theirs, uid)
    shared = control_dir()
    assert shared is not None and len(str(shared)) <= runner_module.MAX_CONTROL_DIR
    assert shared.stat().st_mode & 0o777 == 0o700 and shared.stat().st_uid == uid


def test_close_connections_ends_only_halos_masters(tmp_path: Path, shared_dir: Path) -> None:
    import socket

    user = tmp_path / "ssh_config"
    user.write_text(USER_CONFIG)
    fake = FakeRunner().on(
        ["ssh", "-F", str(sharing_config(user)), "-o", f"ControlPath={shared_dir}/%C", "-O"],
        lambda argv: Result(argv, 0 if argv[-1] == "plain" else 255, "", ""),
    )
    assert close_connections(["plain", "own"], user, fake) == []  # no master here: no ssh run
    assert fake.calls == []
    with socket.socket(socket.AF_UNIX) as master:
        master.bind(str(shared_dir / ("0" * 40)))
        assert close_connections(["plain", "own", "plain"], user, fake) == ["plain"]
    config = str(sharing_config(user))
    assert fake.calls == [
        ("ssh", "-F", config, "-o", f"ControlPath={shared_dir}/%C", "-O", "exit", "--", "plain"),
        ("ssh", "-F", config, "-o", f"ControlPath={shared_dir}/%C", "-O", "exit", "--", "own"),
    ]
