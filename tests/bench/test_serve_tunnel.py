"""halo bench serve --config from a controller, the parts without a real sshd: the route to
the head's server, the tunnel's ssh argv, an ssh that cannot connect. Through a real tunnel:
test_serve_tunnel_lab.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from halo_cluster.bench.endpoint import Route, answers, route, tunnel_argv
from halo_cluster.config import load_config
from halo_cluster.runner.ssh import SSHRunner
from tests.conftest import free_port, require

HALO = str(Path(sys.executable).parent / "halo")


def config_file(tmp: Path, serve: str, node: str = "") -> Path:
    path = tmp / "halo.toml"
    path.write_text(
        '[cluster]\nname = "t"\nssh_config = "ssh_config"\n\n'
        f'[[node]]\nname = "head"\nssh = "root@head"\nfabric_address = "127.0.0.1"\n{node}\n'
        f"[serve]\n{serve}\n"
    )
    return path


@pytest.mark.parametrize(
    ("serve", "node", "expected"),
    [
        ("port = 8000", "", Route("head", "root@head", None, "127.0.0.1", 8000)),
        ('host = "::1"\nport = 9', "", Route("head", "root@head", None, "::1", 9)),
        (
            'host = "0.0.0.0"',
            'mgmt_address = "10.0.0.1"',
            Route("head", "root@head", "10.0.0.1", "127.0.0.1", 8000),
        ),
        ('host = "0.0.0.0"', "", Route("head", "root@head", "head", "127.0.0.1", 8000)),
        (
            'host = "192.168.100.1"',
            "",
            Route("head", "root@head", "192.168.100.1", "192.168.100.1", 8000),
        ),
    ],
)
def test_route(tmp_path: Path, serve: str, node: str, expected: Route) -> None:
    assert route(load_config(config_file(tmp_path, serve, node))) == expected


def test_a_name_the_resolver_cannot_encode_is_a_reason() -> None:
    """An SSH target's host with a label over 63 characters (an ssh_config alias may be
    one): a reason why the server is not reached directly, not a UnicodeError."""
    assert answers("a" * 300, 8000, 1.0) == "not a host name the resolver takes"


def test_tunnel_argv() -> None:
    ssh = SSHRunner("root@head", Path("/c/ssh_config"))
    assert tunnel_argv(ssh, 40001, "127.0.0.1", 8000) == [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=5",
        "-F",
        "/c/ssh_config",
        "-o",  # a tunnel owns its connection: through a shared one its ssh exits at once
        "ControlMaster=no",
        "-o",
        "ControlPath=none",
        "-N",
        "-o",
        "ExitOnForwardFailure=yes",
        "-L",
        "127.0.0.1:40001:127.0.0.1:8000",
        "--",
        "root@head",
    ]
    assert tunnel_argv(SSHRunner("h"), 1, "::1", 2)[-3:] == ["127.0.0.1:1:[::1]:2", "--", "h"]


def tunnels(port: int) -> list[int]:
    """Pids of ssh processes forwarding to 127.0.0.1:port."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0] == b"ssh" and any(a.endswith(f":127.0.0.1:{port}".encode()) for a in argv):
            found.append(int(entry.name))
    return found


def ssh_config(tmp: Path, port: int) -> None:
    (tmp / "ssh_config").write_text(
        f"Host head\n  HostName 127.0.0.1\n  Port {port}\n  User root\n"
        f"  IdentityFile {tmp / 'user_key'}\n  StrictHostKeyChecking no\n"
        "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
    )


def bench_argv(config: Path, *extra: str) -> list[str]:
    return [
        HALO,
        "bench",
        "serve",
        "--config",
        str(config),
        "--concurrency",
        "1,2",
        "--prompts",
        "3",
        "--input-len",
        "16",
        "--out",
        str(config.parent / "serve.json"),
        "--json",
        *extra,
    ]


def test_ssh_that_cannot_connect_is_one_line(tmp_path: Path) -> None:
    require(shutil.which("ssh") is not None, "needs the ssh client")
    closed = free_port()
    (tmp_path / "ssh_config").write_text(
        f"Host head\n  HostName 127.0.0.1\n  Port {closed}\n  StrictHostKeyChecking no\n"
        "  UserKnownHostsFile /dev/null\n"
    )
    config = config_file(tmp_path, "port = 8000")
    done = subprocess.run(
        bench_argv(config), capture_output=True, text=True, timeout=60, env=dict(os.environ)
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        "halo: error: cannot open an SSH tunnel to head (root@head) for the server on "
        f"127.0.0.1:8000: ssh: connect to host 127.0.0.1 port {closed}: Connection refused\n"
    )
