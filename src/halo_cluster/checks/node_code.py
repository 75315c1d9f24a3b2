"""How each node runs halo's node-side commands: its Python (halo's node code, sent over SSH
and cached by hash) or an installed halo, and whether that halo is this one's version."""

from __future__ import annotations

from collections.abc import Sequence

from halo_cluster.checks import Finding, fail, ok, warn
from halo_cluster.checks.context import NodeReport
from halo_cluster.checks.fixes import q
from halo_cluster.nodecode import refused_path

WANTED_PYTHON = "3.9"


def check_node_python(report: NodeReport) -> Finding:
    """``node.python``: the node's Python runs halo's node code (or a halo is installed);
    a missing or old Python, or a cache that cannot be written, fails for that node only."""
    node = report.node
    found = report.python
    if found is not None:
        return fail("node.python", _summary(found.kind, node.name), found.detail, fix=_fix(report))
    inv = report.inventory
    python = inv.versions.get("python") if inv is not None else None
    if node.halo:
        halo = inv.versions.get("halo") if inv is not None else None
        return ok("node.python", f"halo {halo or '?'} installed ({node.halo}), Python {python}")
    how = "sent now and cached by hash" if report.code_sent else "cached by hash"
    return ok("node.python", f"Python {python} ({node.python}) runs halo's node code ({how})")


def _summary(kind: str, name: str) -> str:
    return {
        "python-missing": f"{name} has no Python to run halo's node code",
        "python-old": f"{name}'s Python is older than {WANTED_PYTHON}",
        "cache": f"{name} cannot cache halo's node code",
        "cache-unsafe": f"{name}'s cache of halo's node code could be changed by another user",
    }.get(kind, f"{name} cannot run halo's node code")


def _fix(report: NodeReport) -> list[str]:
    node = report.node
    assert report.python is not None
    path = refused_path(report.python)
    if path is not None:  # BOOT refused it: nothing from there was run
        ssh = f"ssh -- {q(node.ssh)}"
        return [
            f"{ssh} {q('ls -la ' + q(path))}",
            "# if nobody else should have put anything there: remove it, halo sends its code again",
            f"{ssh} {q('rm -rf ' + q(path))}",
        ]
    if report.python.kind == "cache":
        return [
            f"ssh -- {q(node.ssh)} 'df -h ~/.cache; ls -ld ~/.cache ~/.cache/halo'",
            "# free space there, make it writable, or set XDG_CACHE_HOME for that user",
        ]
    return [
        f"# install Python >= {WANTED_PYTHON} on {node.name} (apt install python3 / "
        "dnf install python3), in its container when it has an exec_prefix",
        f'# or name one in halo.toml: python = "/usr/bin/python3.11" for {node.name}',
    ]


def check_halo_versions(reports: Sequence[NodeReport], controller: str) -> list[Finding]:
    """``cluster.versions_match`` (warn): an installed halo of another version than this one
    runs other node-side code (halo's node code, sent by hash, cannot differ)."""
    skewed = [
        f"{r.node.name}: halo {r.inventory.versions.get('halo')} ({r.node.halo})"
        for r in reports
        if r.node.halo
        and r.inventory is not None
        and r.inventory.versions.get("halo") not in (None, controller)
    ]
    if not skewed:
        return []
    return [
        warn(
            "cluster.versions_match",
            f"an installed halo differs from this halo {controller}",
            *skewed,
            f"this halo: {controller}",
            fix=[
                '# remove the node\'s halo = "…" line: halo then sends its own node code',
                "# or install this halo's version there",
            ],
        )
    ]
