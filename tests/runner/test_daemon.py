"""halo's daemons as systemd units (runner/daemon.py): the unit's text for each manager, and
ExecStart's quoting, read back as systemd reads it, whatever the words hold."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.runner.daemon import SYSTEM, USER, Daemon, exec_start, systemd_join

DAEMON = Daemon(
    "halo-x.service", "halo x", ("/usr/bin/env", "python3", "/var/lib/halo/node.pyz", "x"),
    comment="written by a test", start_limit=(300, 5), service=("KillMode=mixed",),
)  # fmt: skip


def test_the_system_managers_unit() -> None:
    assert DAEMON.text(SYSTEM) == (
        "# written by a test\n[Unit]\nDescription=halo x\n"
        "After=network-online.target\nWants=network-online.target\n"
        "StartLimitIntervalSec=300\nStartLimitBurst=5\n\n"
        "[Service]\nType=simple\nExecStart=/usr/bin/env python3 /var/lib/halo/node.pyz x\n"
        "Restart=on-failure\nRestartSec=5\nKillMode=mixed\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )


def test_the_users_manager_has_no_network_target_and_its_own_install_target() -> None:
    text = DAEMON.text(USER)
    assert "network-online" not in text and text.endswith("WantedBy=default.target\n")


@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=5))
def test_any_words_read_back_from_exec_start(argv: list[str]) -> None:
    line = systemd_join(argv)
    assert "\n" not in line  # a newline in a word can never start a new key
    assert exec_start(f"[Service]\nExecStart={line}\n") == argv


def test_a_state_path_with_quotes_dollars_and_newlines_stays_one_word() -> None:
    path = '/home/a"b/$HOME\\x/\nExecStartPre=/bin/true/%h.sh'
    line = systemd_join(["/bin/bash", path])
    assert line.count("\n") == 0 and "%%h" in line and "$$HOME" in line
    assert exec_start(f"ExecStart={line}") == ["/bin/bash", path]


def test_systemd_reads_the_unit_where_it_can_be_asked(tmp_path: Path) -> None:
    """systemd-analyze verify, where this machine has it (it checks the unit's syntax and
    that ExecStart's program exists)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return  # no systemd here: the tests above are what is checked
    unit = tmp_path / "halo-x.service"
    unit.write_text(Daemon("halo-x.service", "x", ("/bin/sh", "-c", "a $b %c")).text())
    done = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert "Unknown" not in done.stderr and "bad" not in done.stderr.lower(), done.stderr
