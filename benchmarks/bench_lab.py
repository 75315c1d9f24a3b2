"""Speed and footprint of `halo lab` (needs root).

Targets (issue: lab): `lab up` 2 nodes <= 3 s, 8 nodes <= 10 s; `lab down` <= 2 s; memory per
idle node <= 20 MB (RSS of every process in the node's PID namespace).
Writes benchmarks/results/lab.json.

    sudo .venv/bin/python benchmarks/bench_lab.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HALO = str(Path(sys.executable).parent / "halo")


def timed(argv: list[str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def node_rss_mb(init_pid: int) -> float:
    """Sum of RSS over the processes sharing the init's PID namespace."""
    target = os.readlink(f"/proc/{init_pid}/ns/pid")
    total_kb = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") != target:
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
        except OSError:
            continue
    return total_kb / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as cwd:
        for nodes in (2, 8):
            ups, downs, rss = [], [], []
            for _ in range(args.runs):
                ups.append(
                    timed([HALO, "lab", "up", "--name", "bench", "--nodes", str(nodes)], cwd)
                )
                time.sleep(0.5)  # idle
                state = json.loads((Path(cwd) / ".halo-lab" / "bench" / "state.json").read_text())
                rss += [node_rss_mb(n["init_pid"]) for n in state["nodes"]]
                downs.append(timed([HALO, "lab", "down", "--name", "bench"], cwd))
            results[f"{nodes}_nodes"] = {
                "up_median_s": round(statistics.median(ups), 3),
                "up_max_s": round(max(ups), 3),
                "down_median_s": round(statistics.median(downs), 3),
                "down_max_s": round(max(downs), 3),
                "idle_rss_per_node_mb_median": round(statistics.median(rss), 1),
                "idle_rss_per_node_mb_max": round(max(rss), 1),
                "runs": args.runs,
            }
    targets = {"up_2_nodes_s": 3.0, "up_8_nodes_s": 10.0, "down_s": 2.0, "rss_per_node_mb": 20.0}
    two, eight = results["2_nodes"], results["8_nodes"]
    assert isinstance(two, dict) and isinstance(eight, dict)
    met = {
        "up_2_nodes": two["up_median_s"] <= targets["up_2_nodes_s"],
        "up_8_nodes": eight["up_median_s"] <= targets["up_8_nodes_s"],
        "down": max(two["down_median_s"], eight["down_median_s"]) <= targets["down_s"],
        "rss": max(two["idle_rss_per_node_mb_max"], eight["idle_rss_per_node_mb_max"])
        <= targets["rss_per_node_mb"],
    }
    out = {
        "benchmark": "lab",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "system": platform.platform(),
        },
        "results": results,
        "targets": targets,
        "met": met,
    }
    (HERE / "results" / "lab.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
