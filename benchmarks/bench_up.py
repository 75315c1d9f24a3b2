"""`halo up` against a bare `ray start` head + worker sequence on a 2-node lab (needs root
and ray in this venv). Target (issue: lifecycle): halo up <= 1.3 x the bare sequence measured
in the same run; `halo status` <= 2 s. Writes benchmarks/results/up.json.

    sudo .venv/bin/python benchmarks/bench_up.py [--runs 3]
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
BIN = Path(sys.executable).parent
HALO, RAY = str(BIN / "halo"), str(BIN / "ray")


def run(argv: list[str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cwd:
        run([HALO, "lab", "up", "--name", "bup"], cwd)
        lab = Path(cwd) / ".halo-lab" / "bup"
        config, ssh_config = str(lab / "halo.toml"), str(lab / "ssh_config")
        state = json.loads((lab / "state.json").read_text())
        head, worker = state["nodes"][0]["fabric_address"], state["nodes"][1]["fabric_address"]

        def ssh(node: str, *argv: str) -> list[str]:
            return ["ssh", "-F", ssh_config, node, "--", *argv]

        bare, halo, status = [], [], []
        try:
            for _ in range(args.runs):  # alternately
                t = run(
                    ssh(
                        "node1",
                        RAY,
                        "start",
                        "--head",
                        f"--node-ip-address={head}",
                        "--port=6379",
                        "--include-dashboard=false",
                        "--disable-usage-stats",
                        "--num-gpus=0",
                    ),
                    cwd,
                )
                t += run(
                    ssh(
                        "node2",
                        RAY,
                        "start",
                        f"--address={head}:6379",
                        f"--node-ip-address={worker}",
                        "--disable-usage-stats",
                        "--num-gpus=0",
                    ),
                    cwd,
                )
                bare.append(t)
                run([HALO, "down", "--config", config], cwd)
                halo.append(run([HALO, "up", "--config", config], cwd))
                status.append(run([HALO, "status", "--config", config], cwd))
                run([HALO, "down", "--config", config], cwd)
        finally:
            subprocess.run(
                [HALO, "lab", "down", "--name", "bup"], cwd=cwd, check=False, capture_output=True
            )
    ratio = statistics.median(halo) / statistics.median(bare)
    out = {
        "benchmark": "up",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "system": platform.platform(),
        },
        "bare_ray_start_s": [round(x, 2) for x in bare],
        "halo_up_s": [round(x, 2) for x in halo],
        "halo_status_s": [round(x, 2) for x in status],
        "ratio_median": round(ratio, 3),
        "met": {"up_le_1_3x_bare": ratio <= 1.3, "status_le_2_s": max(status) <= 2.0},
    }
    (HERE / "results" / "up.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
