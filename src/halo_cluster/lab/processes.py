"""The processes of lab nodes: finding a node's init, telling whether it runs, ending it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from halo_cluster.errors import HaloError


def child_of(pid: int, timeout_s: float = 5.0) -> int:
    """unshare --fork runs the namespace's init as its child: that child is PID 1 inside."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            children = []
        if children:
            return int(children[0])
        time.sleep(0.005)
    raise HaloError(f"the node's init did not start (unshare pid {pid})")


def pid_alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def kill_tree(pid: int | None) -> None:
    """SIGKILL to a PID-namespace init ends every process in that namespace."""
    if pid is None or not pid_alive(pid):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        _reap()
        time.sleep(0.005)


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def in_netns(pid: int | None, netns: str) -> int | None:
    """``pid`` while it is a process in network namespace ``netns`` (a node's init from an
    old state file may be gone, and its number reused by a process that is not ours)."""
    if pid is None:
        return None
    try:
        mine = os.stat(f"/proc/{pid}/ns/net")
        theirs = os.stat(f"/run/netns/{netns}")
    except OSError:
        return None
    return pid if (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino) else None
