"""NCCL/RCCL debug output (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET) -> which transport
actually carried the data. Pure: text in, verdict out.

"Using network X" is authoritative per process; the channel lines ("via NET/IB/0") confirm
it; the "NET/IB : Using [0]dev:1/RoCE" line tells RoCE from InfiniBand. Bootstrap/OOB
interfaces are control plane only and never decide anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from halo_cluster.jsonout import JsonObject

# host:pid:tid [dev] NCCL INFO ...  (the process is host:pid)
_PREFIX = re.compile(r"^(?P<host>[^\s:]+):(?P<pid>\d+):\d+ \[\d+\] NCCL (?:INFO|WARN)")
_VERSION = re.compile(r"\b(?:NCCL|RCCL) version (\S+)")
_USING_NETWORK = re.compile(r"\bUsing network (\S+)")
_NET_IB_USING = re.compile(r"NET/IB\s*: Using((?:\s*\[\d+\][^\s\[;]+)+)")
_IB_DEV = re.compile(r"\[\d+\]([^\s:/\[]+:\d+)/(IB|RoCE|UNSPECIFIED)")
_VIA = re.compile(r"\bvia NET/([A-Za-z][\w ]*?)/\d+(?:\(\d+\))?(/GDRDMA)?")
_GDR_HCA = re.compile(r"GPU Direct RDMA (Enabled|Disabled) for HCA")
_GDR_RING = re.compile(r"use ring PXN \d+ GDR (\d)")
# rank numbers are at most 7 digits (no job has 10 million ranks): longer ones are noise
_RANK = re.compile(r"\brank (\d{1,7}) nranks (\d{1,7})\b")
_CHANNEL_RANKS = re.compile(
    r"(?:Channel|Ring) \d+(?:/\d+)? : (\d{1,7})(?:\[[0-9a-fx]+\])? -> (\d{1,7})\b"
)
_FAILED_IB = re.compile(r"(Failed to initialize NET plugin IB|NET/IB : No device found)")

EXPECTATIONS = ("roce", "infiniband", "rdma", "socket")
MAX_EVIDENCE = 12


@dataclass
class _Process:
    network: str | None = None
    link_types: set[str] = field(default_factory=set)
    via: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class LogVerdict:
    transport: str  # roce / infiniband / socket / mixed / unknown
    networks: dict[str, str]
    hcas: tuple[str, ...]
    gdr: bool | None
    nccl_version: str | None
    ranks_seen: int
    evidence: tuple[str, ...]

    def to_dict(self) -> JsonObject:
        return {
            "transport": self.transport,
            "networks": dict(self.networks),
            "hcas": list(self.hcas),
            "gdr": self.gdr,
            "nccl_version": self.nccl_version,
            "ranks_seen": self.ranks_seen,
            "evidence": list(self.evidence),
        }

    def meets(self, expect: str) -> bool:
        if expect == "rdma":
            return self.transport in ("roce", "infiniband", "rdma")
        return self.transport == expect


class _Reader:
    def __init__(self) -> None:
        self.processes: dict[str, _Process] = {}
        self.hcas: list[str] = []
        self.gdr: bool | None = None
        self.version: str | None = None
        self.ranks: set[int] = set()
        self.evidence: list[str] = []
        self.via_kept: set[tuple[str, str]] = set()

    def feed(self, source: str, lines: Iterable[str]) -> None:
        for raw in lines:
            line = raw.rstrip("\r\n")
            prefix = _PREFIX.match(line)
            key = f"{prefix['host']}:{prefix['pid']}" if prefix else source
            self._line(key, line)

    def _line(self, key: str, line: str) -> None:
        if self.version is None and (match := _VERSION.search(line)):
            self.version = match.group(1)
        for match in _RANK.finditer(line):
            self.ranks.add(int(match.group(1)))
        if match := _CHANNEL_RANKS.search(line):
            self.ranks.update((int(match.group(1)), int(match.group(2))))
        if match := _USING_NETWORK.search(line):
            self._process(key).network = match.group(1)
            self._keep(line)
        if match := _NET_IB_USING.search(line):
            for dev, link in _IB_DEV.findall(match.group(1)):
                self._process(key).link_types.add(link)
                if dev not in self.hcas:
                    self.hcas.append(dev)
            self._keep(line)
        if match := _VIA.search(line):
            self._process(key).via.add(match.group(1))
            if match.group(2):
                self.gdr = True
            if (key, match.group(1)) not in self.via_kept:  # first channel per process and net
                self.via_kept.add((key, match.group(1)))
                self._keep(line)
        self._gdr(line)
        if _FAILED_IB.search(line):
            self._keep(line)

    def _gdr(self, line: str) -> None:
        if match := _GDR_HCA.search(line):
            self.gdr = bool(self.gdr) or match.group(1) == "Enabled"
        elif match := _GDR_RING.search(line):
            self.gdr = bool(self.gdr) or match.group(1) == "1"

    def _process(self, key: str) -> _Process:
        return self.processes.setdefault(key, _Process())

    def _keep(self, line: str) -> None:
        if line not in self.evidence and len(self.evidence) < MAX_EVIDENCE:
            self.evidence.append(line.strip())

    def verdict(self) -> LogVerdict:
        kinds = {kind for proc in self.processes.values() for kind in _kinds(proc)}
        transport = "unknown" if not kinds else kinds.pop() if len(kinds) == 1 else "mixed"
        networks = {key: proc.network for key, proc in self.processes.items() if proc.network}
        return LogVerdict(
            transport=transport,
            networks=networks,
            hcas=tuple(self.hcas),
            gdr=self.gdr,
            nccl_version=self.version,
            ranks_seen=len(self.ranks) or len(networks),
            evidence=tuple(self.evidence),
        )


def _kinds(proc: _Process) -> set[str]:
    """The transports one process used: its 'Using network' line, confirmed by its channels."""
    names = {proc.network} if proc.network else set()
    names |= proc.via
    kinds = set()
    for name in names:
        if name.lower().startswith("socket"):
            kinds.add("socket")
        elif name.upper().startswith("IB"):
            kinds.add(_ib_kind(proc.link_types))
        else:
            kinds.add("unknown")
    if len(kinds) > 1:
        kinds.discard("unknown")
    return kinds


def _ib_kind(link_types: set[str]) -> str:
    if link_types == {"RoCE"}:
        return "roce"
    if link_types == {"IB"}:
        return "infiniband"
    if {"RoCE", "IB"} <= link_types:
        return "mixed"
    return "rdma"


def parse_logs(sources: Iterable[tuple[str, Iterable[str]]]) -> LogVerdict:
    """Verdict over one or many logs: (name, lines) pairs, ranks interleaved or not."""
    reader = _Reader()
    for name, lines in sources:
        reader.feed(name, lines)
    return reader.verdict()


def parse_log(text: str) -> LogVerdict:
    return parse_logs([("-", text.splitlines())])
