"""PrefixRunner: a node's ``exec_prefix`` (``toolbox run -c vllm --``, ``env PATH=…``) put
before every argv, so a command runs in the node's container or environment. The one
place the prefix is applied: callers write the command itself."""

from __future__ import annotations

from dataclasses import dataclass

from halo_cluster.runner.result import Call, Result, Runner


@dataclass(frozen=True)
class PrefixRunner(Runner):
    inner: Runner
    prefix: tuple[str, ...] = ()

    def execute(self, call: Call) -> Result:
        return self.inner.run([*self.prefix, *call.argv], call.stdin, call.timeout, call.on_line)
