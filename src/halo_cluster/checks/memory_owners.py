"""Who holds a node's memory (issue 47, item 4): the processes a node named in its answer
to the memory check (``engines.scripts.OWNERS``), each with its resident memory and the GPU
memory it holds in GTT (on a unified-memory APU an engine's weights are there, not in its
RSS), and whether halo started it. A forgotten Ray cluster or a second server that holds a
large share is named with how to stop it, before the next model fails far into its load.
Pure: text in, values and lines out."""

from __future__ import annotations

from dataclasses import dataclass

from halo_cluster.jsonout import JsonObject
from halo_cluster.supervision import count

GIB_KIB = 2**20
LARGE_SHARE = 0.25  # of MemTotal: a foreign owner this large refuses a start (--force)
NAMED_SHARE = 0.05  # of MemTotal: an owner this large is named where memory is short


@dataclass(frozen=True)
class MemoryOwner:
    pid: int
    pgid: int
    rss_kib: int
    gtt_kib: int
    halo: bool  # its process group is one halo keeps a pid file for
    command: str

    @property
    def held_kib(self) -> int:
        return self.rss_kib + self.gtt_kib

    def to_dict(self) -> JsonObject:
        return {"pid": self.pid, "command": self.command, "rss_gib": _gib(self.rss_kib),
                "gtt_gib": _gib(self.gtt_kib), "halo": self.halo}  # fmt: skip


@dataclass(frozen=True)
class HostMemory:
    """A node's host as the doctor read it: MemTotal (KiB; None: unread) and the owners."""

    total_kib: int | None
    owners: tuple[MemoryOwner, ...]

    def large(self, share: float, ray: bool = True) -> list[MemoryOwner]:
        """The owners halo did not start holding at least ``share`` of the memory, largest
        first (Ray's processes too unless ``ray``)."""
        if not self.total_kib:
            return []
        found = [o for o in self.owners if not o.halo and o.held_kib >= share * self.total_kib
                 and (ray or not is_ray(o))]  # fmt: skip
        return sorted(found, key=lambda o: o.held_kib, reverse=True)


def parse_owners(text: str) -> list[MemoryOwner]:
    """Every well-formed ``owner=PID PGID RSS GTT halo|other COMMAND`` line (others are
    left out: a node's answer is read, never trusted to be whole)."""
    found = []
    for line in text.splitlines()[:256]:
        if not line.startswith("owner="):
            continue
        parts = line[len("owner=") :].split(" ", 5)
        numbers = [count(p) for p in parts[:4]]
        if len(parts) != 6 or None in numbers:
            continue
        if parts[4] not in ("halo", "other"):
            continue
        pid, pgid, rss, gtt = (int(n or 0) for n in numbers)
        found.append(MemoryOwner(pid, pgid, rss, gtt, parts[4] == "halo", parts[5][:80]))
    return found


RAY = ("ray::", "raylet", "gcs_server")  # ps's 15-character names: ray::RayWorkerW


def is_ray(owner: MemoryOwner) -> bool:
    """A Ray process: perhaps halo's own (Ray from 'halo up' holds another deployment's
    ranks as its actors), which no pid file of halo's names."""
    return owner.command.startswith(RAY) or owner.command == "ray"


def how_to_stop(owner: MemoryOwner) -> str:
    """The command that ends an owner: Ray's way for Ray's processes, else a signal to the
    process (halo knows no other program by name here: an engine it did not start is any
    other process)."""
    if is_ray(owner):
        return "halo down (Ray from halo up), or ray stop (a Ray cluster halo did not start)"
    return f"kill -TERM {owner.pid}"


def owner_line(owner: MemoryOwner, total_kib: int) -> str:
    """'pid 4242 (ray::IDLE) holds 96.0 GiB (75 %): stop it with ray stop (...)'"""
    share = 100 * owner.held_kib / total_kib
    gtt = f", {_gib(owner.gtt_kib)} GiB of it GPU memory (GTT)" if owner.gtt_kib else ""
    return (
        f"pid {owner.pid} ({owner.command}) holds {_gib(owner.held_kib)} GiB ({share:.0f} %"
        f"{gtt}), not halo's: stop it with {how_to_stop(owner)}"
    )


def _gib(kib: int) -> float:
    return round(kib / GIB_KIB, 1)
