"""The Runner of a node without halo installed: halo's node code (``nodecode``) is made sure
to be cached there before a command that uses it runs, and sent once when it is not. It sits
on top of the node's PrefixRunner: what it sends and checks runs inside ``exec_prefix``."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from halo_cluster.nodecode import NodeCode, is_missing
from halo_cluster.runner.result import Call, Result, Runner


@dataclass
class NodeRunner(Runner):
    """A node's Runner that makes sure halo's node code is cached there before a command that
    uses it runs: a command naming the code's hash that comes back ``MISSING`` gets the code
    sent once and runs again (BOOT exits before anything runs); a script (``bash -s``) that
    calls it is preceded by one check. Other commands pass straight through."""

    inner: Runner
    python: str = "python3"
    code: NodeCode | None = None
    sent: bool = False  # whether this runner sent the code (for the doctor's evidence)
    _ready: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def execute(self, call: Call) -> Result:
        argv, stdin, timeout, on_line = call.argv, call.stdin, call.timeout, call.on_line
        code = self.code
        if code is None:
            return self.inner.run(argv, stdin, timeout, on_line)
        direct = code.digest in argv
        if not direct and stdin is not None and code.digest in stdin:
            ready = self.ensure(timeout)
            if not ready.ok:
                return ready
        result = self.inner.run(argv, stdin, timeout, on_line)
        if direct and is_missing(result.returncode, result.stderr):
            with self._lock:
                installed = self._install(timeout)
            if not installed.ok:
                return installed
            result = self.inner.run(argv, stdin, timeout, on_line)
        elif direct:
            self._ready = True
        return result

    def ensure(self, timeout: float = 30.0) -> Result:
        """Check (and when needed send) the code: an ok Result, or the failure to show."""
        assert self.code is not None
        with self._lock:
            if self._ready:
                return Result((), 0, "", "")
            check = self.inner.run(self.code.argv(self.python, []), timeout=timeout)
            if check.ok:
                self._ready = True
                return check
            if not is_missing(check.returncode, check.stderr):
                return check
            return self._install(timeout)

    def _install(self, timeout: float) -> Result:
        """Send the code (the caller holds the lock)."""
        assert self.code is not None
        argv = self.code.install_argv(self.python)
        result = self.inner.run(argv, self.code.payload(), max(timeout, 60.0))
        if result.ok:
            self._ready = True
            self.sent = True
        return result
