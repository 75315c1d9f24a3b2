"""vLLM's own start-up lines -> which backend its ranks used and where they met (pure).

On CPU (and on any Gloo group) NCCL's debug log does not exist; the engine's words are
vLLM's: every rank logs

    world_size=2 rank=1 local_rank=0 distributed_init_method=tcp://198.19.1.11:43291 backend=gloo

and under Ray each line carries the actor's prefix with the node it runs on:

    (CpuRayWorkerProc pid=114, ip=198.19.1.12) (Worker pid=114) INFO ... world_size=2 rank=1 ...

(Ray leaves ``ip=`` out for actors on the driver's own node). With vLLM's own multi-node
executor each node writes its own log; the caller names the node of each log.

The verdict says which backend, which rendezvous address, and where each rank ran; the
caller checks those addresses against each node's transport plan (``check_ranks``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from halo_cluster.jsonout import JsonObject

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_INIT = re.compile(
    r"world_size=(?P<world>\d+) rank=(?P<rank>\d+) local_rank=(?P<local>\d+) "
    r"distributed_init_method=(?P<method>\S+) backend=(?P<backend>\w+)"
)
_RAY_PREFIX = re.compile(r"^\((?P<actor>[\w.]+) pid=(?P<pid>\d+)(?:, ip=(?P<ip>[0-9a-fA-F.:]+))?\)")
_TCP = re.compile(r"^tcp://\[?(?P<host>[^\]]+?)\]?:(?P<port>\d+)$")
_SHM_OFF = ("falling back to torch.distributed", "halo adapter:")


@dataclass(frozen=True)
class EngineRank:
    rank: int
    world_size: int
    backend: str
    init_method: str
    address: str | None  # where the rank ran: Ray's ip=, else the log's own node address
    source: str  # the log it came from
    line: str


@dataclass(frozen=True)
class EngineVerdict:
    backend: str | None  # "gloo", "nccl" (RCCL reports as nccl), a mix as "mixed", None
    init_address: str | None
    init_port: int | None
    world_size: int | None
    ranks: tuple[EngineRank, ...]
    shm_fallback: bool  # no shared-memory all-reduce: torch.distributed over the network
    evidence: tuple[str, ...] = field(default=())

    @property
    def complete(self) -> bool:
        """Every rank of the world logged its start."""
        return self.world_size is not None and {r.rank for r in self.ranks} == set(
            range(self.world_size)
        )

    def to_dict(self) -> JsonObject:
        data = asdict(self)
        data["ranks"] = [{k: v for k, v in asdict(r).items() if k != "line"} for r in self.ranks]
        data["evidence"] = list(self.evidence)
        data["complete"] = self.complete
        return data


def clean(line: str) -> str:
    return _ANSI.sub("", line).rstrip("\r\n")


def parse_engine_logs(logs: Iterable[tuple[str, str | None, Iterable[str]]]) -> EngineVerdict:
    """``logs``: (name, the node address of that log or None, lines). A rank that starts
    twice (a restart within one log) counts once, its last start."""
    ranks: dict[int, EngineRank] = {}
    evidence: list[str] = []
    fallback = False
    for name, node_address, lines in logs:
        for raw in lines:
            line = clean(raw)
            if any(marker in line for marker in _SHM_OFF):
                fallback = True
                evidence.append(line.strip())
            match = _INIT.search(line)
            if not match:
                continue
            prefix = _RAY_PREFIX.match(line)
            address = prefix.group("ip") if prefix and prefix.group("ip") else node_address
            rank = int(match["rank"])
            ranks[rank] = EngineRank(
                rank=rank,
                world_size=int(match["world"]),
                backend=match["backend"],
                init_method=match["method"],
                address=address,
                source=name,
                line=line.strip(),
            )
    ordered = tuple(ranks[k] for k in sorted(ranks))
    evidence = [r.line for r in ordered] + list(dict.fromkeys(evidence))[:4]
    return _verdict(ordered, fallback, tuple(evidence))


def _verdict(
    ranks: tuple[EngineRank, ...], fallback: bool, evidence: tuple[str, ...]
) -> EngineVerdict:
    backends = {r.backend for r in ranks}
    methods = {r.init_method for r in ranks}
    host, port = None, None
    if len(methods) == 1:
        tcp = _TCP.match(next(iter(methods)))
        if tcp:
            host, port = tcp["host"], int(tcp["port"])
    worlds = {r.world_size for r in ranks}
    return EngineVerdict(
        backend=None if not backends else backends.pop() if len(backends) == 1 else "mixed",
        init_address=host,
        init_port=port,
        world_size=worlds.pop() if len(worlds) == 1 else None,
        ranks=ranks,
        shm_fallback=fallback,
        evidence=evidence,
    )


def check_ranks(
    verdict: EngineVerdict,
    head_address: str | None,
    node_addresses: Mapping[str, str],
    head_local: str | None = None,
) -> list[str]:
    """Problems with where the ranks met and ran, one sentence each ([] when all is well).

    ``node_addresses``: node name -> its planned fabric address. The rendezvous must be the
    head's planned address; each rank must run on a planned address (``head_local`` is the
    address to assume for lines without Ray's ``ip=`` — the driver's node).
    """
    problems = []
    if not verdict.ranks:
        return ["the engine's log shows no rank starting (no 'world_size=… backend=…' line)"]
    if not verdict.complete:
        seen = ", ".join(str(r.rank) for r in verdict.ranks)
        problems.append(f"the log shows ranks {seen} of {verdict.world_size or '?'} only")
    if verdict.init_address is None:
        problems.append("the ranks do not share one tcp:// rendezvous address")
    elif verdict.init_address != head_address:
        problems.append(
            f"the ranks met at {verdict.init_address}, not at the head's planned fabric "
            f"address {head_address}"
        )
    planned = {address: name for name, address in node_addresses.items()}
    for rank in verdict.ranks:
        where = rank.address or head_local
        if where not in planned:
            problems.append(
                f"rank {rank.rank} ran at {where or 'an unknown address'}, which is no node's "
                "planned fabric address"
            )
    return problems


def rank_nodes(
    verdict: EngineVerdict, node_addresses: Mapping[str, str], head: str
) -> dict[int, str]:
    """rank -> node name (lines without an address are on the head)."""
    by_address = {address: name for name, address in node_addresses.items()}
    return {
        r.rank: by_address.get(r.address or "", head if r.address is None else "?")
        for r in verdict.ranks
    }


# a vLLM log line's prefix: "(Worker_PP1 pid=502) ERROR 12-02 18:08:22 [file.py:1063] "
_LEVEL_PREFIX = re.compile(
    r"^(?:\([\w.]+ pid=\d+[^)]*\)\s*)?(?:[A-Z]+ \d\d-\d\d [\d:]+ \[[^\]]+\]\s?)?"
)
_RAISED = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?(?P<name>[A-Z]\w*(?:Error|Exception))(?P<rest>:.*)?$")
# what a process raises because another one failed first: not the cause
_CONSEQUENCES = ("EngineDeadError", "EngineCore encountered")


def raised(lines: Iterable[str]) -> str | None:
    """The exception an engine's log last raised, as one line: "AssertionError: assert
    self.intermediate_tensors is not None" (a bare assertion gets its statement, the line
    above it that is not a caret). Exceptions raised only because another process failed
    (vLLM's EngineDeadError) are passed over while a cause is there. None: none raised."""
    body = [_LEVEL_PREFIX.sub("", clean(line)).rstrip() for line in lines]
    found: list[str] = []
    for index, line in enumerate(body):
        match = _RAISED.match(line.strip())
        if match is None:
            continue
        said = match["name"] + (match["rest"] or "")
        if not match["rest"]:
            above = [b.strip() for b in body[max(0, index - 4) : index]]
            statement = next((b for b in reversed(above) if b and set(b) != {"^"}), "")
            if statement and not statement.startswith(("File ", "Traceback")):
                said = f"{said}: {statement}"
        found.append(said[:300])
    causes = [f for f in found if not any(c in f for c in _CONSEQUENCES)]
    chosen = causes or found
    return chosen[-1] if chosen else None
