"""Reaching the head's OpenAI-compatible server from where halo runs (the controller, which is
usually not the head).

A server bound to a reachable address (``0.0.0.0``, or one of the head's addresses) is
reached straight at that address (for ``0.0.0.0``: the head's ``mgmt_address``, else the host
of its SSH target) when it answers from here. A server on the head's loopback (``127.0.0.1``,
halo serve's default), or one that does not answer from here, is reached through an SSH tunnel
over the head's SSH target, with the cluster's ssh_config and the options every halo ssh
command has:

    ssh -o BatchMode=yes -o ConnectTimeout=5 [-F ssh_config] -N -o ExitOnForwardFailure=yes
        -L 127.0.0.1:<free local port>:<server address>:<port> -- <target>

The tunnel lives as long as the ``with reach(...)`` block and is closed when it ends, also on
an error or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO

from halo_cluster.config import Config
from halo_cluster.errors import HaloError
from halo_cluster.jsonout import JsonObject
from halo_cluster.runner.local import LocalRunner
from halo_cluster.runner.ssh import SSHRunner

WILDCARD = ("0.0.0.0", "::", "")
LOOPBACK = ("localhost", "::1")


def is_loopback(host: str) -> bool:
    return host in LOOPBACK or host.startswith("127.")


def _bracket(host: str) -> str:
    """An IPv6 address in brackets, as URLs and ``ssh -L`` want it."""
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True)
class Route:
    """Where the server is: ``direct`` is the address to try from here (None: only the head
    can reach it), ``forward`` the address a tunnel forwards to, as the head sees it."""

    node: str
    ssh: str
    direct: str | None
    forward: str
    port: int


@dataclass(frozen=True)
class Endpoint:
    url: str  # what halo connects to
    via: str  # "direct" | "ssh-tunnel"
    route: Route

    @property
    def server(self) -> str:
        """The server's address: where halo reached it, or (tunnelled) as the head sees it."""
        return (
            self.route.direct if self.via == "direct" and self.route.direct else self.route.forward
        )

    def to_dict(self) -> JsonObject:
        return {
            "via": self.via,
            "node": self.route.node,
            "server": f"{_bracket(self.server)}:{self.route.port}",
            **({"ssh": self.route.ssh} if self.via == "ssh-tunnel" else {}),
        }


def route(config: Config) -> Route:
    serve, head = config.serve, config.head
    if is_loopback(serve.host):
        return Route(head.name, head.ssh, None, serve.host, serve.port)
    if serve.host in WILDCARD:
        return Route(head.name, head.ssh, head.mgmt_address or head.host, "127.0.0.1", serve.port)
    return Route(head.name, head.ssh, serve.host, serve.host, serve.port)


def tunnel_argv(ssh: SSHRunner, local_port: int, forward: str, port: int) -> list[str]:
    # SSHRunner's own options (BatchMode, ConnectTimeout, -F), for a tunnel: never through
    # a shared connection (an -N -L client handing its forward to a master exits at once)
    return [
        *ssh.ssh_options(tunnel=True),
        "-N",
        "-o",
        "ExitOnForwardFailure=yes",
        "-L",
        f"127.0.0.1:{local_port}:{_bracket(forward)}:{port}",
        "--",
        ssh.target,
    ]


def answers(host: str, port: int, timeout_s: float) -> str | None:
    """None when something accepts a TCP connection at host:port, else why not."""
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as err:
        return err.strerror or str(err) or type(err).__name__
    except UnicodeError:  # a name the resolver cannot encode (a label over 63 characters)
        return "not a host name the resolver takes"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Tunnel:
    """One ``ssh -N -L`` process; ``open`` returns once the local port accepts connections."""

    def __init__(self, argv: list[str], local_port: int, wait_s: float) -> None:
        self.argv, self.local_port, self.wait_s = argv, local_port, wait_s
        self.process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    def open(self) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (kept open while ssh runs)
        try:
            self.process = LocalRunner().start(self.argv, stderr=self._stderr)
        except OSError as err:
            self.close()
            raise HaloError(f"cannot run ssh for the tunnel: {err.strerror or err}") from None
        try:
            self._wait()
        except BaseException:
            self.close()
            raise

    def _wait(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.wait_s
        while self.process.poll() is None:
            if answers("127.0.0.1", self.local_port, 0.5) is None:
                return
            if time.monotonic() > deadline:
                raise HaloError(f"the SSH tunnel did not open within {self.wait_s:g} s")
            time.sleep(0.05)
        raise HaloError(self.stderr_tail() or f"ssh exited with code {self.process.returncode}")

    def stderr_tail(self) -> str:
        """ssh's last line on stderr (why it failed, or a forward it could not connect)."""
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        return lines[-1].strip() if lines else ""

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


def open_tunnel(config: Config, where: Route, tries: int = 3) -> Tunnel:
    """A tunnel to the server on the head; a local port taken meanwhile moves to another."""
    ssh = SSHRunner(where.ssh, config.ssh_config)
    for attempt in range(tries):
        local = free_port()
        tunnel = Tunnel(
            tunnel_argv(ssh, local, where.forward, where.port),
            local,
            ssh.connect_timeout_s + 15.0,
        )
        try:
            tunnel.open()
            return tunnel
        except HaloError as err:
            if "already in use" in str(err) and attempt + 1 < tries:
                continue
            raise HaloError(
                f"cannot open an SSH tunnel to {where.node} ({where.ssh}) for the server on "
                f"{_bracket(where.forward)}:{where.port}: {err}"
            ) from None
    raise AssertionError("unreachable")


@contextlib.contextmanager
def reach(config: Config, say: Callable[[str], None], timeout_s: float = 3.0) -> Iterator[Endpoint]:
    """The head's server, reachable from here for the duration of the block."""
    where = route(config)
    if where.direct is not None:
        why = answers(where.direct, where.port, timeout_s)
        if why is None:
            yield Endpoint(f"http://{_bracket(where.direct)}:{where.port}", "direct", where)
            return
        say(
            f"{_bracket(where.direct)}:{where.port} does not answer from here ({why}): "
            f"trying an SSH tunnel through {where.ssh}"
        )
    else:
        say(f"the server listens on {where.node}'s loopback: SSH tunnel through {where.ssh}")
    tunnel = open_tunnel(config, where)
    try:
        yield Endpoint(f"http://127.0.0.1:{tunnel.local_port}", "ssh-tunnel", where)
    except HaloError as err:
        note = tunnel.stderr_tail()  # e.g. "channel 2: open failed: connect failed: ..."
        if note:
            raise HaloError(f"{err} (ssh: {note})") from None
        raise
    finally:
        tunnel.close()
