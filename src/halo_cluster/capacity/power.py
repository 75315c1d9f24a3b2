"""Tokens per joule for the planner's layouts (``halo plan --watts``): the draw of one node
while it decodes, from the hardware profile's typical figure, a number given, or a measured
``halo bench serve`` result (the average watts of its measured nodes), and each layout's
predicted tokens/s over the draw of the nodes it runs on. Pure: the result file comes in as
its parsed JSON."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from halo_cluster.capacity.spec import Hardware
from halo_cluster.errors import UsageError
from halo_cluster.jsonout import JsonObject

HARDWARE = "hardware"  # --watts alone: the hardware profile's typical draw
MAX_WATTS = 100_000.0  # per node: far above any box this plans for


@dataclass(frozen=True)
class Draw:
    """What one node draws while it decodes, and where the figure comes from."""

    watts_per_node: float
    source: str

    def to_dict(self) -> JsonObject:
        return {"watts_per_node": round(self.watts_per_node, 2), "source": self.source}


def given_draw(text: str, hardware: Hardware) -> Draw | None:
    """``--watts`` as a number of watts per node, or ``hardware`` (the profile's typical
    draw); None when it names a file (``measured_draw`` reads it)."""
    if text == HARDWARE:
        if hardware.typical_watts is None:
            raise UsageError(
                f"the {hardware.id} profile has no typical draw: give --watts W (per node) or "
                "--watts RESULT.json (a halo bench serve run that measured the nodes' power)"
            )
        why = f"{hardware.id}'s typical draw ({hardware.watts_source})"
        return Draw(hardware.typical_watts, why)
    if text.endswith(".json"):
        return None
    try:
        watts = float(text)
    except ValueError:
        raise UsageError(
            f"--watts {text!r}: give watts per node, or a bench serve result .json"
        ) from None
    if not math.isfinite(watts) or not 0 < watts <= MAX_WATTS:
        raise UsageError(
            f"--watts must be a number of watts per node from 0 to {MAX_WATTS:g}, got {text!r}"
        )
    return Draw(watts, f"given: {watts:g} W per node")


def measured_draw(result: dict[str, Any], origin: str) -> Draw:
    """The average watts of the nodes a ``halo bench serve`` result measured (over every
    level's timed window, weighted by its seconds)."""
    joules = seconds = 0.0
    nodes: set[str] = set()
    for level in _list(result.get("levels")):
        energy = level.get("energy") if isinstance(level, dict) else None
        found = energy.get("nodes") if isinstance(energy, dict) else None
        for node in _list(found):
            if not isinstance(node, dict):
                continue
            j, s = _number(node.get("joules")), _number(node.get("seconds"))
            if j is not None and s is not None and s > 0 and j >= 0:
                joules, seconds = joules + j, seconds + s
                nodes.add(str(node.get("node")))
    if seconds <= 0 or not nodes:
        raise UsageError(f"{origin}: no node's power was measured in this run (no power source)")
    return Draw(joules / seconds, f"measured: {origin}, {len(nodes)} node(s)")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _number(value: Any) -> float | None:
    good = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if good and math.isfinite(value) else None


def nodes_used(tp: int, pp: int, gpus_per_node: int) -> int:
    """How many nodes a layout of ``tp`` × ``pp`` ranks runs on."""
    return max(1, math.ceil(tp * pp / gpus_per_node))


def tokens_per_joule(tokens_per_s: float, nodes: int, draw: Draw) -> float:
    return tokens_per_s / (nodes * draw.watts_per_node)
