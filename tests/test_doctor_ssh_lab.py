"""halo doctor over a real SSH path: a real sshd on 127.0.0.1 with a generated key."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.lab

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@pytest.fixture
def sshd(tmp_path: Path, lab_host: None) -> Iterator[tuple[Path, int]]:
    for name in ("host_key", "user_key"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)], check=True
        )
    (tmp_path / "authorized_keys").write_text((tmp_path / "user_key.pub").read_text())
    port = free_port()
    (tmp_path / "sshd_config").write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {tmp_path / 'host_key'}\n"
        f"AuthorizedKeysFile {tmp_path / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        f"PasswordAuthentication no\nStrictModes no\nUsePAM no\nPidFile {tmp_path / 'sshd.pid'}\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(tmp_path / "sshd_config")], stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60  # a loaded machine's sshd; it ends once sshd listens
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    try:
        yield tmp_path, port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_doctor_over_real_ssh(sshd: tuple[Path, int]) -> None:
    tmp, port = sshd
    closed = free_port()
    hosts = ""
    for alias, p in (("node1", port), ("node2", port), ("node3", closed)):
        hosts += (
            f"Host {alias}\n  HostName 127.0.0.1\n  Port {p}\n  User root\n  IdentityFile {tmp / 'user_key'}\n"
            "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
        )
    (tmp / "ssh_config").write_text(hosts)
    halo = str(Path(sys.executable).parent / "halo")
    nodes = "".join(
        f'[[node]]\nname = "{n}"\nssh = "{n}"\nfabric_address = "127.0.0.1"\nhalo = "{halo}"\ngpus = 0\n\n'
        for n in ("node1", "node2", "node3")
    )
    (tmp / "halo.toml").write_text(
        f'[cluster]\nname = "t"\ntransport = "ethernet"\nssh_config = "ssh_config"\n\n{nodes}'
    )
    result = subprocess.run(
        [halo, "doctor", "--config", str(tmp / "halo.toml"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    reach = [f for f in data["cluster"]["findings"] if f["check"] == "cluster.reachable"]
    assert [(f["severity"], f["summary"]) for f in reach] == [("fail", "node3 did not answer")]
    assert "Connection refused" in reach[0]["evidence"][0]
    assert data["nodes"]["node1"]["findings"] and data["nodes"]["node3"]["findings"] == []
    checks = {f["check"]: f["severity"] for f in data["cluster"]["findings"]}
    assert checks["cluster.fabric_ping"] == "ok"  # node1 <-> node2 over 127.0.0.1, real ping
    assert checks["cluster.versions_match"] == "ok" and checks["cluster.ssh_path"] == "ok"
