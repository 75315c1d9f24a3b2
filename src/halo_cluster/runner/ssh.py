"""SSHRunner: argv on a node through the system ``ssh`` (BatchMode, ConnectTimeout, the
user's ssh config honoured, one shared connection per node: ``runner.sharing``), the remote
command quoted word by word, so no argument is ever re-split by the remote shell."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from halo_cluster.runner.local import LocalRunner
from halo_cluster.runner.result import Call, Result, Runner
from halo_cluster.runner.sharing import sharing_config

# Two first commands to a node at once both connect; one makes the master, the other says
# so on stderr and carries on on its own connection (as without sharing): not the command's
# own output.
_MUX_RACE = re.compile(r"^ControlSocket \S+ already exists, disabling multiplexing\r?\n", re.M)


@dataclass(frozen=True)
class SSHRunner(Runner):
    target: str
    ssh_config: Path | None = None
    connect_timeout_s: int = 5
    local: Runner = field(default_factory=LocalRunner)
    share: bool = True  # one connection per node, reused by every command

    def ssh_options(self, tunnel: bool = False) -> list[str]:
        """``ssh`` and its options, up to the ``--`` before the target.

        Commands go through the node's shared connection (a ControlMaster in halo's
        per-user control directory, unless the ssh config shares connections itself). A
        tunnel (``ssh -N -L``) must own its connection: through a master its forward would
        be handed to the master and outlive the tunnel, so ``tunnel=True`` turns sharing
        off for that one ssh."""
        command = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout_s}"]
        shared = sharing_config(self.ssh_config) if self.share and not tunnel else None
        config = shared or self.ssh_config
        if config is not None:
            command += ["-F", str(config)]
        if tunnel:
            command += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
        return command

    def ssh_argv(self, argv: Sequence[str]) -> list[str]:
        """``[ssh, options…, "--", target, command]``. "--" first: a target can never be read
        as an option. ssh hands the remote side one string: every word is quoted so it is
        parsed back exactly. Without a command (a session, or a tunnel built from these
        options) the connection is its own, never a shared one."""
        return [*self.ssh_options(tunnel=not argv), "--", self.target, shlex.join(argv)]

    def execute(self, call: Call) -> Result:
        result = self.local.run(self.ssh_argv(call.argv), call.stdin, call.timeout, call.on_line)
        return Result(call.argv, result.returncode, result.stdout, _MUX_RACE.sub("", result.stderr))
