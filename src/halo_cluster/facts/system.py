"""Host name, OS, kernel, memory and limits."""

from __future__ import annotations

from halo_cluster.facts import parsers as p
from halo_cluster.facts.model import KernelInfo, Memory, OsInfo
from halo_cluster.facts.root import Root


def read_hostname(root: Root) -> str | None:
    for rel in ("proc/sys/kernel/hostname", "etc/hostname"):
        name = root.parse(rel, p.parse_optional_text)
        if name:
            return name
    return None


def read_os(root: Root) -> OsInfo:
    for rel in ("etc/os-release", "usr/lib/os-release"):
        if root.exists(rel):
            values = root.parse(rel, p.parse_key_values) or {}
            return OsInfo(id=values.get("ID"), version_id=values.get("VERSION_ID"))
    return OsInfo(id=None, version_id=None)


def read_kernel(root: Root) -> KernelInfo:
    return KernelInfo(
        release=root.parse("proc/sys/kernel/osrelease", p.parse_text),
        cmdline=root.parse("proc/cmdline", p.parse_cmdline),
    )


def read_memory(root: Root) -> Memory:
    return Memory(total_kib=root.parse("proc/meminfo", p.parse_meminfo_total_kib))


def read_memlock_bytes(root: Root) -> int | None:
    """Soft memlock limit of processes started like this one; None = unlimited (or unknown)."""
    return root.parse("proc/self/limits", p.parse_memlock_bytes)
