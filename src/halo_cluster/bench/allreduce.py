"""The pure part of ``halo bench collective`` and ``halo bench tp``: result schemas, message
sizes, nccl-tests' bus bandwidth, the α/β fit of a sweep, a decode step's all-reduce
schedule, and the transport verdict from the ranks' facts and logs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from halo_cluster.errors import UsageError
from halo_cluster.jsonout import JsonObject
from halo_cluster.schema import SCHEMAS, Fit, SweepRow

SCHEMA = SCHEMAS["collective"]
TP_SCHEMA = SCHEMAS["tp"]
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 1000,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 1000**2,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 1000**3,
}
MAX_BYTES = 8 << 30


def parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise UsageError(f"{text!r} is not a size: use bytes with B, KiB, MiB or GiB (e.g. 64KiB)")
    value = int(match.group(1)) * _UNITS[match.group(2).lower()]
    if not 1 <= value <= MAX_BYTES:
        raise UsageError(f"{text!r}: sizes go from 1 B to 8 GiB")
    return value


def parse_sizes(text: str) -> list[int]:
    """``8B:256MiB`` (doubling, like nccl-tests ``-f 2``) or a list ``8KiB,64KiB``."""
    if ":" in text:
        low_text, _, high_text = text.partition(":")
        low, high = parse_size(low_text), parse_size(high_text)
        if low > high:
            raise UsageError(f"--sizes {text!r}: the first size must not exceed the last")
        sizes = []
        size = low
        while size <= high:
            sizes.append(size)
            size *= 2
        return sizes
    sizes = sorted({parse_size(part) for part in text.split(",") if part.strip()})
    if not sizes:
        raise UsageError("--sizes is empty")
    return sizes


def bus_factor(ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth factor: busbw = algbw × 2(n−1)/n."""
    return 2 * (ranks - 1) / ranks if ranks > 1 else 1.0


def sweep_row(size: int, seconds: float, ranks: int) -> SweepRow:
    algbw = size / seconds / 1e9  # GB/s, as nccl-tests prints
    return {
        "bytes": size,
        "time_us": _sig(seconds * 1e6),
        "algbw_gbs": _sig(algbw),
        "busbw_gbs": _sig(algbw * bus_factor(ranks)),
    }


def _sig(value: float, digits: int = 6) -> float:
    return float(f"{value:.{digits}g}")


def fit_alpha_beta(rows: Sequence[SweepRow], ranks: int) -> Fit | None:
    """Least squares of t(s) = a + b·s, weighted by 1/t² (relative error, so small messages
    count as much as large ones), mapped onto the capacity planner's ring all-reduce model:
    t = 2(n−1)·α + 2(n−1)/n · s / β. None when the sweep cannot determine both."""
    points = [(float(r["bytes"]), float(r["time_us"]) * 1e-6) for r in rows if r["time_us"] > 0]
    if len({s for s, _t in points}) < 2 or ranks < 2:
        return None
    weights = [1 / (t * t) for _s, t in points]
    sw = sum(weights)
    sx = sum(w * s for w, (s, _t) in zip(weights, points))
    sy = sum(w * t for w, (_s, t) in zip(weights, points))
    sxx = sum(w * s * s for w, (s, _t) in zip(weights, points))
    sxy = sum(w * s * t for w, (s, t) in zip(weights, points))
    det = sw * sxx - sx * sx
    if det <= 0:
        return None
    b = (sw * sxy - sx * sy) / det
    a = (sy - b * sx) / sw
    if b <= 0:
        return None
    a = max(a, 0.0)
    steps = 2 * (ranks - 1)
    worst = max(abs(a + b * s - t) / t for s, t in points)
    return {
        "alpha_us": round(a / steps * 1e6, 4),
        "beta_gbps": round(steps / ranks * 8 / (b * 1e9), 4),
        "intercept_us": round(a * 1e6, 3),
        "max_rel_error": round(worst, 4),
    }


def predicted_s(fit: Fit, size: float, ranks: int) -> float:
    steps = 2 * (ranks - 1)
    return steps * fit["alpha_us"] * 1e-6 + steps / ranks * size * 8 / (fit["beta_gbps"] * 1e9)


def tp_schedule(layers: int, hidden: int, batch: int, activation_bytes: int = 2) -> dict[str, int]:
    """A decode step's tensor-parallel communication: 2·L + 2 all-reduces (after attention
    and after the MLP in every layer, plus embedding and logits) of batch × hidden values."""
    return {"allreduces": 2 * layers + 2, "bytes": batch * hidden * activation_bytes}


def transport_verdict(
    backend: str, facts: Sequence[dict[str, Any]], logs: Sequence[str]
) -> JsonObject:
    """The transport the ranks really used: for NCCL/RCCL, decided from the ranks' own debug
    logs (``verify-log``); Gloo is TCP, on the interface each rank's plan named."""
    if backend != "nccl":
        interfaces = [f.get("env", {}).get("GLOO_SOCKET_IFNAME") for f in facts]
        return {
            "backend": "gloo",
            "transport": "socket",
            "interfaces": interfaces,
            "evidence": [
                f"rank {r}: GLOO_SOCKET_IFNAME={i or '(unset: Gloo picks an interface)'}"
                for r, i in enumerate(interfaces)
            ],
        }
    from halo_cluster.witness.nccl_log import parse_logs

    verdict = parse_logs([(f"rank{r}", text.splitlines()) for r, text in enumerate(logs)])
    return {"backend": "nccl", **verdict.to_dict()}


def fallback_error(planned_rdma: bool, transport: dict[str, Any]) -> str | None:
    """The refusal when the plan asked for RDMA and NCCL's logs show sockets (or a mix)."""
    if not planned_rdma or transport.get("backend") != "nccl":
        return None
    if transport.get("transport") not in ("socket", "mixed"):
        return None
    evidence = "; ".join(list(transport.get("evidence", []))[:3])
    return (
        f"the plan asked for RDMA but NCCL used {transport['transport']} ({evidence});"
        " --allow-fallback to accept"
    )
