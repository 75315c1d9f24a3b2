"""Processes a benchmark starts on nodes, and the guarantee that none outlives the run.

Every remote process runs under ``timeout`` (so it ends even if halo is killed) and leaves
its pid in ``$XDG_RUNTIME_DIR/halo-bench/<run>-<role>.pid`` (else under /tmp); ``cleanup``
kills everything of the run on every node it touched, after success, failure or Ctrl-C.
Scripts go to ``bash -s`` on stdin, so no value is ever parsed by a remote shell as code.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence

from halo_cluster.client.fanout import fan_out
from halo_cluster.client.node import NodeClient
from halo_cluster.config import NodeConfig
from halo_cluster.runner.quote import exports, private_dir, private_files
from halo_cluster.runner.result import LineSink, Result

JOB_DIR = '"${XDG_RUNTIME_DIR:-/tmp}/halo-bench"'
KILL_GRACE_S = 2
PORT_IN_USE = 98  # start()'s exit code when something already listens on the port


class RemoteJobs:
    def __init__(self, clients: Mapping[str, NodeClient], run_id: str | None = None) -> None:
        self.clients = clients
        self.run_id = run_id or os.urandom(4).hex()
        self.touched: dict[str, NodeConfig] = {}
        self._seq = 0

    def _pidfile(self, role: str) -> str:
        """Unique per job: two servers of the same role never share a pid file."""
        self._seq += 1
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in role)
        return f"{JOB_DIR}/{self.run_id}-{self._seq}-{safe}.pid"

    def _run(
        self, node: NodeConfig, script: str, timeout: float, on_line: LineSink | None = None
    ) -> Result:
        self.touched[node.name] = node
        return self.clients[node.name].script(script, timeout, on_line)

    def start(
        self,
        node: NodeConfig,
        role: str,
        argv: Sequence[str],
        limit_s: float,
        listen_port: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        """Start ``argv`` in the background on ``node``; with ``listen_port``, return once
        something listens there (or fail after 10 s, with the server's own output)."""
        pidfile = self._pidfile(role)
        log = pidfile.removesuffix(".pid") + ".log"
        wait, check = "", ""
        if listen_port is not None:
            check = (
                f"if ss -Hltn 'sport = :{listen_port}' | grep -q .; then\n"
                f"  echo 'port {listen_port} is already in use' >&2; exit {PORT_IN_USE}\n"
                "fi\n"
            )
            wait = (
                "for _ in $(seq 100); do\n"
                f"  ss -Hltn 'sport = :{listen_port}' | grep -q . && exit 0\n"
                f'  kill -0 "$pid" 2>/dev/null || {{ cat {log} >&2; exit 1; }}\n'
                "  sleep 0.1\n"
                "done\n"
                f"echo 'nothing listens on port {listen_port} after 10 s' >&2; cat {log} >&2\n"
                "exit 1\n"
            )
        script = (
            f"set -e\n{exports(env or {})}{check}{private_dir(JOB_DIR)}{private_files(log)}"
            f"setsid timeout -k {KILL_GRACE_S} {limit_s:g} {shlex.join(argv)}"
            f" > {log} 2>&1 < /dev/null &\n"
            f"pid=$!\necho $pid > {pidfile}\nset +e\n{wait}"
        )
        return self._run(node, script, timeout=30)

    def run(
        self,
        node: NodeConfig,
        role: str,
        argv: Sequence[str],
        limit_s: float,
        env: Mapping[str, str] | None = None,
        on_line: LineSink | None = None,
    ) -> Result:
        """Run ``argv`` on ``node`` and wait (at most ``limit_s`` there, a little more here);
        ``on_line`` sees its output lines as they come."""
        script = (
            f"set -e\n{exports(env or {})}{private_dir(JOB_DIR)}"
            f"echo $$ > {self._pidfile(role)}\n"
            f"exec timeout -k {KILL_GRACE_S} {limit_s:g} {shlex.join(argv)}\n"
        )
        return self._run(node, script, timeout=limit_s + KILL_GRACE_S + 10, on_line=on_line)

    def stop(self, node: NodeConfig, role: str) -> Result:
        """Kill this run's jobs of ``role`` on ``node`` (a server once its client is done)."""
        return self._run(node, self._kill_script(f"*-{role}"), timeout=15)

    def _kill_script(self, pattern: str) -> str:
        return (
            f"for f in {JOB_DIR}/{self.run_id}-{pattern}.pid; do\n"
            '  [ -e "$f" ] || continue\n'
            '  pid=$(cat "$f")\n'
            '  kill -TERM -- "-$pid" "$pid" 2>/dev/null || true\n'
            '  rm -f "$f" "${f%.pid}.log"\n'
            "done\n"
        )

    def cleanup(self) -> dict[str, str]:
        """Kill every process of this run on every node it touched; per node: done or why not."""
        script = self._kill_script("*")
        done = fan_out(self.touched, lambda name: self.clients[name].script(script, timeout=15))
        return {outcome.item: _cleaned(outcome.value, outcome.error) for outcome in done}


def _cleaned(result: Result | None, error: Exception | None) -> str:
    if result is not None and result.ok:
        return "clean"
    return f"not cleaned: {result.error_text() if result is not None else error}"
