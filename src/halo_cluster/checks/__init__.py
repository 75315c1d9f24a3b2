"""Doctor checks: pure functions from inventories to findings. They never print or exit."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from halo_cluster.jsonout import JsonObject

SEVERITIES = ("ok", "info", "warn", "fail")
_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str
    summary: str
    evidence: tuple[str, ...] = field(default=())
    fix: tuple[str, ...] = field(default=())

    def to_dict(self) -> JsonObject:
        return {
            "check": self.check,
            "severity": self.severity,
            "summary": self.summary,
            "evidence": list(self.evidence),
            "fix": list(self.fix),
        }


def ok(check: str, summary: str, *evidence: str) -> Finding:
    return Finding(check, "ok", summary, tuple(evidence))


def info(check: str, summary: str, *evidence: str, fix: Iterable[str] = ()) -> Finding:
    return Finding(check, "info", summary, tuple(evidence), tuple(fix))


def warn(check: str, summary: str, *evidence: str, fix: Iterable[str] = ()) -> Finding:
    return Finding(check, "warn", summary, tuple(evidence), tuple(fix))


def fail(check: str, summary: str, *evidence: str, fix: Iterable[str] = ()) -> Finding:
    return Finding(check, "fail", summary, tuple(evidence), tuple(fix))


def rank(severity: str) -> int:
    return _RANK[severity]


def worst_first(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-rank(f.severity), f.check))


def summarize(findings: Iterable[Finding]) -> dict[str, int]:
    counts = {name: 0 for name in reversed(SEVERITIES)}
    for finding in findings:
        counts[finding.severity] += 1
    return counts
