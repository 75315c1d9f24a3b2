"""The second witness (pure): bytes each node's interfaces and RDMA port carried per
generated token while a probe request ran, and whether the tensor-parallel traffic took
the planned path.

Counters are read on every node before and after one request of N tokens; everything
else on the nodes is quiet then (halo's own SSH reads go over the management network and
are small). A decode step's all-reduces move kilobytes per token, so the path that
carried them stands out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from halo_cluster.facts.model import PathCounters

PATHS = ("fabric", "mgmt", "rdma")
# Below this, a path carried no tensor-parallel traffic worth the name (a decode step of
# the smallest model moves kilobytes per token).
MIN_TP_BYTES_PER_TOKEN = 256.0


def per_token(
    before: Mapping[str, PathCounters], after: Mapping[str, PathCounters], tokens: int
) -> dict[str, dict[str, Any]]:
    """path -> {name, rx/tx bytes and bytes per token}; paths readable at both ends only.
    A counter that went backwards (a reset, a wrap) is reported as unknown, never negative."""
    out: dict[str, dict[str, Any]] = {}
    for path in PATHS:
        a, b = before.get(path), after.get(path)
        if a is None or b is None or a.name != b.name:
            continue
        rx = _delta(a.rx_bytes, b.rx_bytes)
        tx = _delta(a.tx_bytes, b.tx_bytes)
        total = None if rx is None or tx is None else rx + tx
        out[path] = {
            "name": a.name,
            "rx_bytes": rx,
            "tx_bytes": tx,
            "bytes_per_token": None if total is None or tokens <= 0 else round(total / tokens, 1),
        }
    return out


def _delta(first: int | None, second: int | None) -> int | None:
    if first is None or second is None or second < first:
        return None
    return second - first


def check_paths(
    traffic: Mapping[str, Mapping[str, Mapping[str, Any]]], rdma_planned: bool
) -> list[str]:
    """Problems, one sentence each, for ``witness.traffic`` (node -> per_token() of that node) of
    the nodes that hold ranks: the planned path must carry the tensor-parallel traffic.

    - RDMA planned: the RDMA port carries at least as much per token as the fabric
      interface's TCP counters (RoCE traffic bypasses them), and at least the minimum.
    - TCP planned: the fabric interface carries at least the minimum per token and more
      than the management interface (unless they are the same interface).
    """
    problems = []
    for node, paths in traffic.items():
        fabric = _bpt(paths.get("fabric"))
        mgmt = _bpt(paths.get("mgmt"))
        if rdma_planned:
            rdma = _bpt(paths.get("rdma"))
            if rdma is None:
                problems.append(f"{node}: the RDMA port's counters could not be read")
            elif rdma < MIN_TP_BYTES_PER_TOKEN or (fabric is not None and rdma < fabric):
                problems.append(
                    f"{node}: the RDMA port carried {rdma:g} B/token, the fabric's TCP "
                    f"{fabric if fabric is not None else '?'} B/token: the traffic did not use RDMA"
                )
            continue
        if fabric is None:
            problems.append(f"{node}: the fabric interface's counters could not be read")
            continue
        same = (paths.get("mgmt") or {}).get("name") == (paths.get("fabric") or {}).get("name")
        if fabric < MIN_TP_BYTES_PER_TOKEN:
            problems.append(
                f"{node}: the fabric interface carried only {fabric:g} B/token: the "
                "tensor-parallel traffic went elsewhere"
            )
        elif mgmt is not None and not same and mgmt > fabric:
            problems.append(
                f"{node}: the management interface carried {mgmt:g} B/token, more than the "
                f"fabric's {fabric:g}: the tensor-parallel traffic took the wrong interface"
            )
    return problems


def _bpt(entry: Mapping[str, Any] | None) -> float | None:
    if not entry:
        return None
    value = entry.get("bytes_per_token")
    return float(value) if isinstance(value, (int, float)) else None
