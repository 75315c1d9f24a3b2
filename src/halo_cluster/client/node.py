"""NodeClient: one node as the controller talks to it.

A client's ``runner`` is a stack that ``node_client`` builds over the connection (SSH, or a
runner given by a test or the lab):

    NodeRunner      halo's node code cached on the node before a command uses it (nodes
                    without ``halo = "…"`` only)
    PrefixRunner    the node's ``exec_prefix`` before every argv (its container)
    inner           the connection itself: the node's host

Callers write commands, never the prefix; a script goes to ``bash -s`` on stdin through
``script``; a node-side command with secrets in its environment goes through ``call(…,
env=…)``, which exports them in such a script (never in argv, where ``ps`` shows them).
What belongs to the machine rather than the container (a systemd unit, ``ping`` and
``ethtool`` on the fabric interface) runs through ``host_runner``, outside the prefix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from halo_cluster.bounded.jsonin import loads
from halo_cluster.config import Config, NodeConfig, halo_node_code
from halo_cluster.errors import NodeCallError
from halo_cluster.nodecode import NodeCode
from halo_cluster.printable import printable, quoted
from halo_cluster.runner.node_code import NodeRunner
from halo_cluster.runner.prefix import PrefixRunner
from halo_cluster.runner.quote import SCRIPT_ARGV, node_script
from halo_cluster.runner.result import Call, LineSink, Result, Runner
from halo_cluster.runner.ssh import SSHRunner


@dataclass
class NodeClient(Runner):
    node: NodeConfig
    runner: Runner  # inside exec_prefix (PrefixRunner), sending the node code (NodeRunner)
    code: NodeCode | None = None  # None when node.halo is set

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def sent(self) -> bool:
        """Whether this client sent halo's node code to the node (the doctor's evidence)."""
        return isinstance(self.runner, NodeRunner) and self.runner.sent

    @property
    def host_runner(self) -> Runner:
        """The connection beneath the stack: commands on the node's host, outside its
        ``exec_prefix``. For what belongs to the machine, not to the container: a systemd
        unit (``monitor/deploy.py``), ``ping`` and ``ethtool`` on the fabric interface
        (``cluster/gather.py``). No node code is sent through it."""
        runner = self.runner
        while isinstance(runner, NodeRunner | PrefixRunner):
            runner = runner.inner
        return runner

    def command(self, *args: str) -> list[str]:
        """argv of a node-side command (``halo_cluster.node``): the node's installed halo,
        else halo's node code run by the node's Python (``node.python``)."""
        if self.node.halo:
            return [self.node.halo, *args]
        if self.code is None:
            raise ValueError(f"{self.name}: no halo configured and no node code to send")
        return self.code.argv(self.node.python, args)

    def execute(self, call: Call) -> Result:
        """``argv`` on the node, inside its exec_prefix."""
        return self.runner.run(call.argv, call.stdin, call.timeout, call.on_line)

    def script(self, text: str, timeout: float = 60.0, on_line: LineSink | None = None) -> Result:
        """``text`` run by ``bash -s`` on the node (on stdin), inside its exec_prefix."""
        return self.runner.run(SCRIPT_ARGV, text, timeout, on_line)

    def host_script(self, text: str, timeout: float = 60.0) -> Result:
        """``text`` run by ``bash -s`` on the node's host, outside its exec_prefix."""
        return self.host_runner.run(SCRIPT_ARGV, text, timeout)

    def call(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        on_line: LineSink | None = None,
    ) -> Result:
        """A node-side command (``command(*args)``). With ``env``, it runs from a ``bash -s``
        script that exports it (``runner.quote.node_script``): secrets never in argv."""
        argv = self.command(*args)
        if not env:
            return self.run(argv, timeout=timeout, on_line=on_line)
        return self.script(node_script(env, argv), timeout, on_line)

    def call_json(
        self, *args: str, env: Mapping[str, str] | None = None, timeout: float = 60.0
    ) -> Any:
        """A node-side command's stdout, parsed as JSON. A failure, or output that is not
        JSON, raises NodeCallError: one line naming the node and the reason."""
        result = self.call(*args, env=env, timeout=timeout)
        what = args[0] if args else "halo"
        if not result.ok:
            raise NodeCallError(f"{self.name}: {what} failed: {escaped(result.error_text())}")
        try:
            return loads(result.stdout)
        except ValueError as err:
            raise NodeCallError(
                f"{self.name}: unreadable {what} output from {self.node.runs} "
                f"({escaped(str(err), 120)}; got {first_bytes(result.stdout)})"
            ) from None


def escaped(text: str, limit: int = 240) -> str:
    """``text`` as it came from a node, for a one-line message: ``printable``, at most
    ``limit`` characters of it."""
    return printable(text, limit=limit)


def first_bytes(text: str, limit: int = 60) -> str:
    """The first characters of what a node sent, escaped and quoted, for an error line."""
    return quoted(text, limit)


def node_client(node: NodeConfig, inner: Runner) -> NodeClient:
    """``node``'s client over ``inner`` (its connection): exec_prefix before every argv and,
    for a node without an installed halo, this halo's node code sent when needed."""
    prefixed = PrefixRunner(inner, node.exec_prefix)
    if node.halo:
        return NodeClient(node, prefixed)
    code = halo_node_code()
    return NodeClient(node, NodeRunner(prefixed, node.python, code), code)


def ssh_clients(config: Config) -> dict[str, NodeClient]:
    """One client per node, over SSH (one shared connection per node)."""
    return {n.name: node_client(n, SSHRunner(n.ssh, config.ssh_config)) for n in config.nodes}


def clients_from(config: Config, runners: Mapping[str, Runner]) -> dict[str, NodeClient]:
    """One client per node over the given connections (FakeRunners in tests, the lab's)."""
    return {n.name: node_client(n, runners[n.name]) for n in config.nodes}
