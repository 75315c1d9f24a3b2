"""How the supervisor runs on the head (supervise/service.py), run for real by bash in a
private mount namespace: without systemd it is a detached process of its own group (its pid
file, its log, stopped by 'halo stop'); where /run/systemd/system exists it is written as a
unit and started through systemctl. This machine has no systemd running, so systemctl and
loginctl are stand-ins that record what they were asked: the unit's text and the calls are
what is checked, never that systemd ran it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from halo_cluster.supervise import service
from tests.conftest import require

STANDIN = """#!/bin/bash
echo "$(basename "$0") $*" >> "$HALO_TEST_CALLS"
[ "$1" = show-user ] && echo no
exit 0
"""


@pytest.fixture
def head(tmp_path: Path) -> Path:
    require(os.geteuid() == 0, "a private mount namespace needs root")
    for sub in ("home", "state", "bin", "units", "systemd"):
        (tmp_path / sub).mkdir()
    for tool in ("systemctl", "loginctl"):
        path = tmp_path / "bin" / tool
        path.write_text(STANDIN)
        path.chmod(0o755)
    return tmp_path


def on_head(tmp: Path, script: str, systemd: bool) -> subprocess.CompletedProcess[str]:
    """``script`` by bash -s as on a head: /run/systemd and /etc/systemd/system are this
    test's own directories (with or without the mark of a running systemd)."""
    setup = (
        f"mount --bind {tmp}/systemd /run/systemd && "
        f"mount --bind {tmp}/units /etc/systemd/system && "
        + ("mkdir -p /run/systemd/system && " if systemd else "")
        + "exec bash -s"
    )
    env = {
        "PATH": f"{tmp}/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(tmp / "home"),
        "XDG_STATE_HOME": str(tmp / "state"),
        "HALO_TEST_CALLS": str(tmp / "calls"),
    }
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", setup],
        input=script, capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip


def calls(tmp: Path) -> list[str]:
    path = tmp / "calls"
    return path.read_text().splitlines() if path.exists() else []


ARGV = ["python3", "-c", "import time\nprint('supervising', flush=True)\ntime.sleep(300)"]


def test_unit_names_keep_only_what_systemd_takes_as_is() -> None:
    assert service.unit_name("lab-b1") == "halo-supervise-lab-b1.service"
    assert service.unit_name("a b/c$") == "halo-supervise-a-b-c-.service"


def start(head: Path, systemd: bool) -> tuple[str, str]:
    """The supervisor of cluster 'strix' started on the head: (its files' base, the mode)."""
    base = f"{head}/state/halo/supervise-strix"
    (head / "state" / "halo").mkdir(mode=0o700)
    started = on_head(head, service.start_script("strix", ARGV, base), systemd=systemd)
    assert started.returncode == 0, started.stderr
    return base, started.stdout.splitlines()[-1]


def test_without_systemd_it_runs_detached_and_stops(head: Path) -> None:
    base, mode = start(head, systemd=False)
    assert mode == "mode=detached"
    log = head / "state" / "halo" / "supervise-strix.log"
    pidfile = head / "state" / "halo" / "supervise-strix.pid"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "supervising" not in (
        log.read_text() if log.exists() else ""
    ):
        time.sleep(0.1)
    assert log.read_text() == "supervising\n"
    pid = int(pidfile.read_text())
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[:2] == [b"python3", b"-c"]  # the wrapper exec'd the command: one pid
    wrapper = Path(base + ".sh")
    assert wrapper.stat().st_mode & 0o777 == 0o700
    assert f"export HOME={head}/home\n" in wrapper.read_text()
    assert calls(head) == []  # no systemctl where systemd does not run
    stopped = on_head(head, service.stop_script("strix"), systemd=False)
    assert stopped.returncode == 0, stopped.stderr
    assert not Path(f"/proc/{pid}").exists() or b"Z" in Path(f"/proc/{pid}/stat").read_bytes()
    assert on_head(head, service.stop_script("strix"), systemd=False).returncode == 3


def test_with_systemd_as_root_it_is_an_enabled_unit(head: Path) -> None:
    base, mode = start(head, systemd=True)
    assert mode == "mode=systemd"
    unit = head / "units" / "halo-supervise-strix.service"
    assert unit.read_text() == (
        "[Unit]\n"
        "Description=halo supervisor of cluster strix\n"
        "After=network-online.target\n"
        "Wants=network-online.target\n"
        "StartLimitIntervalSec=300\n"
        "StartLimitBurst=5\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"ExecStart=/bin/bash {base}.sh\n"
        "Restart=on-failure\n"
        "RestartSec=5\n"
        "KillMode=mixed\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )
    assert not list((head / "units").glob(".*"))  # written beside, renamed into place
    assert calls(head) == [
        "systemctl daemon-reload",
        "systemctl enable --quiet halo-supervise-strix.service",
        "systemctl restart halo-supervise-strix.service",
    ]
    stopped = on_head(head, service.stop_script("strix"), systemd=True)
    assert stopped.returncode == 0, stopped.stderr  # is-active said it ran
    assert not unit.exists()  # no boot starts it again
    assert calls(head)[3:] == [
        "systemctl is-active --quiet halo-supervise-strix.service",
        "systemctl disable --now halo-supervise-strix.service",
        "systemctl daemon-reload",
    ]
