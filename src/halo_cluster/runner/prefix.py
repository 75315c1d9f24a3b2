"""PrefixRunner: a node's ``exec_prefix`` (``toolbox run -c vllm --``, ``env PATH=…``) put
before every argv, so a command runs in the node's container or environment. The one
place the prefix is applied: callers write the command itself."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from halo_cluster.runner.result import LineSink, Result, Runner


@dataclass(frozen=True)
class PrefixRunner:
    inner: Runner
    prefix: tuple[str, ...] = ()

    def run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        timeout: float = 30.0,
        on_line: LineSink | None = None,
    ) -> Result:
        return self.inner.run([*self.prefix, *argv], stdin, timeout, on_line)
