"""A node's power sources, read from a root: amdgpu's hwmon (``power1_average`` and
``power1_input`` in microwatts: gauges; ``energy1_input`` in microjoules: a counter, where
the driver has it) and RAPL through powercap (``energy_uj`` in microjoules: a counter that
wraps at ``max_energy_range_uj``; the ``package-N`` and ``psys`` domains, on AMD too).
``amd-smi metric --power --json`` is read by ``parse_amd_smi_power`` (text in, readings
out) where the tool is installed.

Each ``PowerReading`` is the source's value when it was read; the energy over a window is
``facts.energy``. Standard library only, Python 3.9: the node side reads it. A
source that cannot be read is a warning (RAPL's ``energy_uj`` is often root's alone) and
no reading."""

from __future__ import annotations

import json
import math
from typing import Any

from halo_cluster.errors import ParseError
from halo_cluster.facts import parsers as p
from halo_cluster.facts.model import COUNTER, GAUGE, PowerReading
from halo_cluster.facts.root import Root

HWMON = "sys/class/hwmon"
POWERCAP = "sys/class/powercap"
MILLION = 1e6  # micro-units per unit


def read_power(root: Root) -> tuple[PowerReading, ...]:
    """Every power source below the root, read once."""
    return (*_amdgpu(root), *_rapl(root))


def _amdgpu(root: Root) -> list[PowerReading]:
    found = []
    for dev in root.listdir(HWMON):
        base = f"{HWMON}/{dev}"
        if root.parse(f"{base}/name", p.parse_text, quiet=True) != "amdgpu":
            continue
        for attr, kind in (("power1_average", GAUGE), ("power1_input", GAUGE),
                           ("energy1_input", COUNTER)):  # fmt: skip
            micro = root.parse(f"{base}/{attr}", parse_micro)
            if micro is not None:
                found.append(PowerReading(f"{dev}/{attr}", "amdgpu", "gpu", kind, micro / MILLION))
    return found


def _rapl(root: Root) -> list[PowerReading]:
    found = []
    for zone in root.listdir(POWERCAP):
        if not zone.startswith("intel-rapl:"):  # the AMD and Intel RAPL zones both say so
            continue
        base = f"{POWERCAP}/{zone}"
        name = root.parse(f"{base}/name", p.parse_text, quiet=True) or zone
        energy = root.parse(f"{base}/energy_uj", parse_micro)
        if energy is None:
            continue
        wrap = root.parse(f"{base}/max_energy_range_uj", parse_micro)
        found.append(PowerReading(
            f"{zone}/energy_uj", "rapl", name, COUNTER, energy / MILLION,
            None if wrap is None or wrap <= 0 else wrap / MILLION,
        ))  # fmt: skip
    return found


def parse_micro(text: str) -> int:
    """A sysfs power or energy attribute: a whole number of micro-units, 0 or more."""
    value = p.parse_int(text)
    if value < 0:
        raise ParseError("a negative power or energy reading", text)
    return value


def parse_amd_smi_power(text: str) -> tuple[PowerReading, ...]:
    """``amd-smi metric --power --json``: each GPU's socket power in watts (a gauge). The
    tool has printed a list of GPUs and, in later releases, an object holding one; the
    power is ``{"value": W, "unit": "W"}`` or a bare number, and "N/A" where not supported
    (no reading)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise ParseError("amd-smi printed no JSON", text) from None
    gpus = data.get("gpu_data", data) if isinstance(data, dict) else data
    if isinstance(gpus, dict):
        gpus = [gpus]
    if not isinstance(gpus, list):
        raise ParseError("amd-smi's answer holds no list of GPUs", text)
    found = []
    for index, gpu in enumerate(gpus):
        if not isinstance(gpu, dict):
            raise ParseError("an amd-smi GPU entry is not an object", text)
        watts = _watts(gpu.get("power"))
        if watts is not None:
            number = gpu.get("gpu", index)
            found.append(PowerReading(f"amd-smi gpu {number}", "amd-smi", "gpu", GAUGE, watts))
    return tuple(found)


def _watts(power: Any) -> float | None:
    if not isinstance(power, dict):
        return None
    for key in ("socket_power", "current_socket_power", "average_socket_power"):
        value = power.get(key)
        if isinstance(value, dict):
            unit, value = value.get("unit", "W"), value.get("value")
            if unit not in ("W", "mW"):
                continue
            scale = 1e-3 if unit == "mW" else 1.0
        else:
            scale = 1.0
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if math.isfinite(value) and value >= 0:
            return float(value) * scale
    return None
