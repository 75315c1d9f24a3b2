"""The limits a running engine really has (issue 47, item 1): its process's
``/proc/PID/limits`` and the memory limit of its cgroup, as a node answered
``engines.scripts.limits_script``; who set them (a systemd unit, a container, a login
session) from ``/proc/PID/cgroup``; and what falls short of the transport plan, with the fix
for that owner. A shell's limits say nothing of a unit's or a container's: this reads the
engine's own (pure: text in, values and lines out)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from halo_cluster.errors import WireError
from halo_cluster.jsonout import JsonObject
from halo_cluster.supervision import count

MIB = 2**20
GIB = 2**30
V1_NO_LIMIT = 2**62  # cgroup v1 shows no limit as the largest page-aligned 64-bit number
NOFILE_WANTED = 65535  # what vLLM raises its own soft limit to where the hard one allows
SECTION = re.compile(r"^== (limits|cgroup|memory\.max)$")
_LIMIT_LINE = re.compile(r"^(Max [a-z ]+?)\s{2,}(\S+)\s+(\S+)(?:\s+(\S+))?\s*$")
_CONTAINER = re.compile(r"(docker|libpod|cri-containerd|crio)-([0-9a-f]{12})[0-9a-f]*\.scope$")
_CGROUPFS_CONTAINER = re.compile(r"^/(docker|libpod)/([0-9a-f]{12})[0-9a-f]{52}(/|$)")
CAP_IPC_LOCK = 14  # a process with it locks memory past RLIMIT_MEMLOCK (RDMA registration too)


@dataclass(frozen=True)
class Owner:
    """Who gave the engine its limits: ``kind`` is "system unit", "user unit",
    "container" or "login session"; ``name`` the unit, the container (its runtime and id)
    or the session's scope ("" where the cgroup names none)."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}" if self.name else self.kind


@dataclass(frozen=True)
class EngineLimits:
    """One node's engine process: its soft limits (None: unlimited) and its cgroup's
    ``memory.max`` (None: no limit, or none readable)."""

    node: str
    pid: int
    memlock_bytes: int | None
    nofile: int | None
    cgroup: str
    memory_max_bytes: int | None
    ipc_lock: bool = False  # CAP_IPC_LOCK in its effective set: its memlock limit binds nothing

    @property
    def owner(self) -> Owner:
        return owner_of(self.cgroup)

    def to_dict(self) -> JsonObject:
        return {
            "pid": self.pid,
            "memlock_bytes": self.memlock_bytes,
            "nofile": self.nofile,
            "cgroup": self.cgroup,
            "memory_max_bytes": self.memory_max_bytes,
            "owner": str(self.owner),
            "ipc_lock": self.ipc_lock,
        }


def parse_limits_answer(node: str, text: str) -> EngineLimits | None:
    """A node's answer to ``limits_script``: None when the engine does not run there; a
    WireError of one line when the answer is not what the script prints."""
    fields: dict[str, str] = {}
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines()[:400]:
        found = SECTION.match(line)
        if found:
            current = sections.setdefault(found.group(1), [])
        elif current is not None:
            current.append(line)
        elif "=" in line:
            key, _, value = line.partition("=")
            fields[key] = value.strip()
    if fields.get("alive") != "1":
        return None
    pid = fields.get("pid", "")
    if count(pid) is None or "limits" not in sections:
        raise WireError(f"{node}: the engine's limits: no /proc/PID/limits in the answer")
    soft = _soft_limits(node, sections["limits"])
    return EngineLimits(
        node=node,
        pid=int(pid),
        memlock_bytes=soft.get("Max locked memory"),
        nofile=soft.get("Max open files"),
        cgroup=_cgroup(sections.get("cgroup", [])),
        memory_max_bytes=_memory_max(node, sections.get("memory.max", [])),
        ipc_lock=_has_capability(fields.get("cap_eff", ""), CAP_IPC_LOCK),
    )


def _has_capability(hex_set: str, bit: int) -> bool:
    """Whether /proc/PID/status's CapEff (hex) holds capability ``bit`` (False unread)."""
    try:
        return bool(int(hex_set[:16], 16) >> bit & 1) if hex_set else False
    except ValueError:
        return False


def _soft_limits(node: str, lines: list[str]) -> dict[str, int | None]:
    """The soft column of /proc/PID/limits by name (None: unlimited)."""
    found: dict[str, int | None] = {}
    for line in lines:
        match = _LIMIT_LINE.match(line)
        if not match:
            continue
        name, value = match.group(1), match.group(2)
        if value == "unlimited":
            found[name] = None
        elif value.isascii() and value.isdigit():  # RLIM_INFINITY as a number: unlimited
            found[name] = count(value) if len(value) <= 18 else None
        else:
            raise WireError(f"{node}: /proc/PID/limits: {name!r} is {value!r}, not a number")
    for name in ("Max locked memory", "Max open files"):
        if name not in found:
            raise WireError(f"{node}: /proc/PID/limits has no {name!r} line")
    return found


def _cgroup(lines: list[str]) -> str:
    """The process's cgroup: the unified (v2) path, or on a v1 or hybrid host where that
    is the root, systemd's own hierarchy (which names the unit or scope)."""
    paths: dict[str, str] = {}
    for line in lines:
        parts = line.strip().split(":", 2)
        if len(parts) == 3:
            paths.setdefault(parts[1], parts[2])
    unified = paths.get("", "")
    if unified not in ("", "/"):
        return unified
    return paths.get("name=systemd") or unified or "/"


def _memory_max(node: str, lines: list[str]) -> int | None:
    """memory.max (v2: "max" when there is none) or memory.limit_in_bytes (v1: a number
    near 2^63 when there is none)."""
    value = lines[0].strip() if lines else "max"
    if value == "max":
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > 20:
        raise WireError(f"{node}: the cgroup's memory.max is {value[:40]!r}, not a number")
    limit = count(value)  # None past 18 digits: beyond any machine's memory
    return None if limit is None or limit >= V1_NO_LIMIT else limit


def owner_of(cgroup: str) -> Owner:
    """Who set a process's limits, from its cgroup path: the container whose scope it is
    in, else the systemd unit (a user manager's units below ``user@UID.service``), else the
    login session (the limits PAM gave the SSH session that started it)."""
    parts = [p for p in cgroup.split("/") if p]
    runtimes = {"libpod": "podman", "cri-containerd": "containerd", "crio": "cri-o"}
    boxed = _CGROUPFS_CONTAINER.match(cgroup)  # docker or podman with the cgroupfs driver
    if boxed:
        return Owner("container", f"{runtimes.get(boxed.group(1), 'docker')} {boxed.group(2)}")
    for part in reversed(parts):
        match = _CONTAINER.search(part)
        if match:
            runtime = runtimes.get(match.group(1), match.group(1))
            return Owner("container", f"{runtime} {match.group(2)}")
    units = [p for p in parts if p.endswith(".service")]
    user = any(p.startswith("user@") for p in parts)
    if units and not units[-1].startswith("user@"):
        return Owner("user unit" if user else "system unit", units[-1])
    scope = parts[-1] if parts and parts[-1].endswith(".scope") else ""
    return Owner("login session", scope)


def limit_findings(
    limits: EngineLimits, rdma: bool, need_bytes: float | None
) -> tuple[list[str], list[str], list[str]]:
    """(problems, notes, fix) for one node's engine against the plan: locked memory that is
    not unlimited under an RDMA plan is a problem (the NIC's memory registration fails with
    ENOMEM, NCCL/RCCL stop or fall back to sockets), unless the process holds CAP_IPC_LOCK
    (root, or a container given it: the limit then binds nothing); a cgroup memory limit
    below what the model needs there is a problem; fewer open files than vLLM raises its
    own limit to is a note."""
    problems: list[str] = []
    notes: list[str] = []
    fix: list[str] = []
    owner = limits.owner
    where = f"{limits.node}: the engine (pid {limits.pid}, {owner})"
    if rdma and limits.memlock_bytes is not None and not limits.ipc_lock:
        problems.append(
            f"{where} may lock only {_size(limits.memlock_bytes)} of memory: RDMA memory "
            "registration fails (ENOMEM) and NCCL/RCCL stop or fall back to sockets"
        )
        fix += memlock_fix(owner)
    if (
        need_bytes is not None
        and limits.memory_max_bytes is not None
        and limits.memory_max_bytes < need_bytes
    ):
        problems.append(
            f"{where} is held to {_size(limits.memory_max_bytes)} by its cgroup "
            f"(memory.max); the model needs {_size(int(need_bytes))} there"
        )
        fix += memory_fix(owner)
    if limits.nofile is not None and limits.nofile < NOFILE_WANTED:
        notes.append(
            f"{where} may open {limits.nofile} files, fewer than the {NOFILE_WANTED} vLLM "
            "raises its own limit to where it may (many connections or shards fail with 'Too "
            "many open files')"
        )
    return problems, notes, fix


@dataclass(frozen=True)
class LimitReport:
    """One node's engine limits against the plan: what was read (None: the node told
    nothing) and what falls short (problems refuse, notes do not), with the fix for the
    limits' owner. ``to_dict`` is the node's entry in ``halo serve --json``'s limits."""

    limits: EngineLimits | None
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    fix: tuple[str, ...] = ()

    def to_dict(self) -> JsonObject:
        read = {} if self.limits is None else self.limits.to_dict()
        lists = {"problems": self.problems, "notes": self.notes, "fix": self.fix}
        return {**read, **{key: list(lines) for key, lines in lists.items()}}


def limit_report(limits: EngineLimits | None, rdma: bool, need_bytes: float | None) -> LimitReport:
    """``limits`` held against the plan (nothing to hold where the node told nothing)."""
    if limits is None:
        return LimitReport(None)
    problems, notes, fix = limit_findings(limits, rdma, need_bytes)
    return LimitReport(limits, tuple(problems), tuple(notes), tuple(fix))


def memlock_fix(owner: Owner) -> list[str]:
    if owner.kind == "container":
        return [f"# {owner}: start it with --ulimit memlock=-1:-1 (compose: ulimits: memlock: -1)"]
    if owner.kind == "system unit":
        return [
            f"sudo systemctl edit {owner.name}   # [Service] LimitMEMLOCK=infinity",
            f"sudo systemctl restart {owner.name}",
        ]
    if owner.kind == "user unit":
        return [
            f"systemctl --user edit {owner.name}   # [Service] LimitMEMLOCK=infinity",
            "# a user unit cannot go above its manager's limit: "
            "sudo systemctl edit user@.service   # [Service] LimitMEMLOCK=infinity",
            "# then log out and in (or reboot), and restart the unit",
        ]
    return [
        "printf '* soft memlock unlimited\\n* hard memlock unlimited\\n' | "
        "sudo tee /etc/security/limits.d/90-halo-memlock.conf",
        "# then log in again (the SSH session halo starts the engine from reads it)",
    ]


def memory_fix(owner: Owner) -> list[str]:
    if owner.kind == "container":
        return [f"# {owner}: start it without --memory (or with enough for the model)"]
    if owner.kind in ("system unit", "user unit"):
        user = " --user" if owner.kind == "user unit" else ""
        sudo = "" if user else "sudo "
        return [f"{sudo}systemctl{user} edit {owner.name}   # [Service] MemoryMax=infinity"]
    return [
        f"# the cgroup {owner.name or 'of its login session'} limits memory: raise its memory.max"
    ]


def _size(value: int) -> str:
    return f"{value / GIB:.1f} GiB" if value >= GIB else f"{value / MIB:g} MiB"
