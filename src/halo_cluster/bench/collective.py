"""``halo bench collective`` and ``halo bench tp``: all-reduce through the library tensor
parallelism really uses, on one Ray actor per GPU (per node without GPUs), each rank
initialised with its own node's plan (the raylet's environment, which ``halo up`` set).

The pieces: bench/allreduce.py (the pure part: sizes, bus bandwidth, the α/β fit, the
decode replay's schedule, the transport verdict), bench/rank.py (one rank, a Ray actor),
bench/driver.py (``drive`` on the head node, ``halo bench-driver``: imports Ray and torch),
bench/events.py (its JSON lines: ``{"event": "progress", …}``, then one ``result`` or
``error``). This module gathers their names, as callers and tests import them from here.
"""

from __future__ import annotations

from halo_cluster.bench.allreduce import (
    MAX_BYTES,
    SCHEMA,
    TP_SCHEMA,
    bus_factor,
    fallback_error,
    fit_alpha_beta,
    parse_size,
    parse_sizes,
    predicted_s,
    sweep_row,
    tp_schedule,
    transport_verdict,
)
from halo_cluster.bench.driver import Ranks, drive, main_driver, run_sweep, run_tp
from halo_cluster.bench.events import Emit, read_events
from halo_cluster.bench.rank import Worker
from halo_cluster.errors import DriverError
from halo_cluster.units import human_bytes

__all__ = [
    "MAX_BYTES",
    "SCHEMA",
    "TP_SCHEMA",
    "DriverError",
    "Emit",
    "Ranks",
    "Worker",
    "bus_factor",
    "drive",
    "fallback_error",
    "fit_alpha_beta",
    "human_bytes",
    "main_driver",
    "parse_size",
    "parse_sizes",
    "predicted_s",
    "read_events",
    "run_sweep",
    "run_tp",
    "sweep_row",
    "tp_schedule",
    "transport_verdict",
]
