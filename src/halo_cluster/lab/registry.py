"""Labs by name: which labs exist, where their directories are, and what is left of a lab
whose directory (or state) is gone.

Everything a lab makes on the host is named after it: namespaces ``halo-NAME-nodeI``,
bridges ``hbNAMEm``/``hbNAMEf``, veth ends ``hvNAMEI{m,f}``, SSH masters on sockets under
``/run/halo/lab/NAME/ssh``. Every process of a node lives in the node's network namespace.
So a lab can always be found, and removed, by its name alone.
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

from halo_cluster.lab.state import control_dir, runtime_dir
from halo_cluster.runner.local import LocalRunner


@dataclass(frozen=True)
class Leftovers:
    netns: tuple[str, ...]
    links: tuple[str, ...]
    pids: tuple[int, ...]  # processes in the lab's namespaces, and its SSH masters

    def __bool__(self) -> bool:
        return bool(self.netns or self.links or self.pids)

    def describe(self) -> str:
        parts = [
            f"{len(self.netns)} namespace(s)" if self.netns else "",
            f"{len(self.links)} link(s)" if self.links else "",
            f"{len(self.pids)} process(es)" if self.pids else "",
        ]
        return ", ".join(p for p in parts if p) or "nothing"


def find_leftovers(name: str, ip: str = "ip") -> Leftovers:
    """Everything on this host named after lab ``name`` (names are exact: lab 'a' never
    matches lab 'ab')."""
    ns_name = re.compile(rf"halo-{re.escape(name)}-node\d+")
    netns = [w[0] for w in (line.split() for line in _lines([ip, "netns", "list"])) if w]
    netns = [ns for ns in netns if ns_name.fullmatch(ns)]
    link_name = re.compile(rf"hb{re.escape(name)}[mf]|hv{re.escape(name)}\d+[mf]")
    links = [
        word
        for line in _lines([ip, "-o", "link", "show"])
        if len(line.split(":")) > 2
        for word in [line.split(":")[1].strip().split("@")[0]]
        if link_name.fullmatch(word)
    ]
    pids = {int(pid) for ns in netns for pid in _lines([ip, "netns", "pids", ns]) if pid.isdigit()}
    pids |= set(_masters(name))
    return Leftovers(tuple(sorted(netns)), tuple(sorted(links)), tuple(sorted(pids)))


def _masters(name: str) -> list[int]:
    """SSH masters of the lab: their process title names their control socket."""
    marker = f"{control_dir(name)}/".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(b"ssh: ") and marker in cmdline:
            found.append(int(entry))
    return found


def sweep(name: str, ip: str = "ip") -> Leftovers:
    """Remove what is left of lab ``name``: end its processes, delete its namespaces, links
    and bridges and its directory under /run. Returns what was found."""
    found = find_leftovers(name, ip)
    for pid in found.pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
    local = LocalRunner()
    for ns in found.netns:
        local.run([ip, "netns", "del", ns])
    for link in found.links:
        if link.startswith("hv"):  # a veth: its peer in the namespace goes with it
            local.run([ip, "link", "del", link])
    for link in found.links:
        if link.startswith("hb"):
            local.run([ip, "link", "del", link])
    forget(name)
    return found


def forget(name: str) -> None:
    """Remove the lab's directory under /run (registry entry, control sockets)."""
    import shutil

    shutil.rmtree(runtime_dir(name), ignore_errors=True)


def _lines(argv: list[str]) -> list[str]:
    """The command's output lines; none when it could not run or timed out."""
    return LocalRunner().run(argv, timeout=30).stdout.splitlines()
