"""A node as the controller sees it (interim: replaced by the runner package's client)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from halo_cluster.config import Config, NodeConfig
from halo_cluster.errors import NodeCallError
from halo_cluster.runner import LineSink, Result, Runner, exports


@dataclass
class NodeClient:
    node: NodeConfig
    runner: Runner

    @property
    def name(self) -> str:
        return self.node.name

    def command(self, *args: str) -> list[str]:
        return self.node.command(*args)

    def run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        timeout: float = 30.0,
        on_line: LineSink | None = None,
    ) -> Result:
        full = [*self.node.exec_prefix, *argv]
        if on_line is None:  # runners made for tests may not take it
            return self.runner.run(full, stdin=stdin, timeout=timeout)
        return self.runner.run(full, stdin, timeout, on_line)

    def script(self, text: str, timeout: float = 60.0, on_line: LineSink | None = None) -> Result:
        return self.run(["bash", "-s"], text, timeout, on_line)

    def call(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        on_line: LineSink | None = None,
    ) -> Result:
        import shlex

        argv = self.command(*args)
        if env is None:
            return self.run(argv, timeout=timeout, on_line=on_line)
        return self.script(f"set -e\n{exports(env)}exec {shlex.join(argv)}\n", timeout, on_line)

    def call_json(
        self, *args: str, env: Mapping[str, str] | None = None, timeout: float = 60.0
    ) -> Any:
        result = self.call(*args, env=env, timeout=timeout)
        if not result.ok:
            raise NodeCallError(f"{self.name}: {args[0]} failed: {result.error_text()}")
        try:
            return json.loads(result.stdout)
        except ValueError:
            raise NodeCallError(f"{self.name}: {args[0]} answered {result.stdout[:60]!a}") from None


def clients_from(config: Config, runners: Mapping[str, Runner]) -> dict[str, NodeClient]:
    return {n.name: NodeClient(n, runners[n.name]) for n in config.nodes}


def ssh_clients(config: Config) -> dict[str, NodeClient]:
    from halo_cluster.config import halo_node_code
    from halo_cluster.noderunner import NodeRunner
    from halo_cluster.runner import SSHRunner

    runners: dict[str, Runner] = {}
    for n in config.nodes:
        code = None if n.halo else halo_node_code()
        runners[n.name] = NodeRunner(
            SSHRunner(n.ssh, config.ssh_config), n.exec_prefix, n.python, code
        )
    return clients_from(config, runners)
