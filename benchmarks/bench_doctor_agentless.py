"""`halo doctor` against bare nodes (halo's node code sent over SSH) versus nodes with halo
installed (needs root: a lab).

Target (issue: agentless node side): on a 2-node and an 8-node lab, the doctor with the
node code already cached is within 10 % of the doctor against nodes where halo is installed.
The first run (the code sent to every node) is measured too, and, for information, bare
nodes that run the node code in the engine environment. Rounds interleave the labs, so that
drift of the machine hits all alike. Writes
benchmarks/results/doctor_agentless.json.

    sudo .venv/bin/python benchmarks/bench_doctor_agentless.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HALO = str(Path(sys.executable).parent / "halo")
TARGET = 1.10


def run(argv: list[str], cwd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)


def doctor(config: str, cwd: str) -> float:
    """Seconds of one `halo doctor --json`; it must have reached every node."""
    start = time.perf_counter()
    done = run([HALO, "doctor", "--config", config, "--json"], cwd)
    seconds = time.perf_counter() - start
    report = json.loads(done.stdout)
    reachable = [f for f in report["cluster"]["findings"] if f["check"] == "cluster.reachable"]
    if not reachable or reachable[0]["severity"] != "ok":
        raise SystemExit(f"doctor did not reach every node: {reachable}")
    return seconds


def lab_up(name: str, nodes: int, mode: str, cwd: str, engine: bool = False) -> tuple[str, Path]:
    argv = [HALO, "lab", "up", "--name", name, "--nodes", str(nodes), f"--{mode}", "--json"]
    argv += [] if engine else ["--no-engine", "--no-llama-cpp"]
    done = run(argv, cwd)
    if done.returncode != 0:
        raise SystemExit(f"lab up failed: {done.stderr.strip()}")
    state = json.loads(done.stdout)
    return state["config"], Path(state["dir"])


def forget_code(lab_dir: Path) -> None:
    """Empty every node's cache (each node has its own HOME in the lab directory)."""
    for cache in (lab_dir / "home").glob("*/.cache/halo"):
        shutil.rmtree(cache)


def summary(values: list[float]) -> dict[str, object]:
    return {
        "median_s": round(statistics.median(values), 4),
        "min_s": round(min(values), 4),
        "max_s": round(max(values), 4),
        "runs_s": [round(v, 4) for v in values],
    }


def measure(nodes: int, rounds: int, cwd: str) -> dict[str, object]:
    """Like for like: bare nodes with only the system's python3 against nodes running the
    installed halo (both without the engine). For information, bare nodes that run the node
    code in the engine environment (as in a serving container): its larger site-packages
    makes the version look-ups (importlib.metadata) slower, whatever runs there."""
    bare_config, bare_dir = lab_up("bbare", nodes, "bare", cwd)
    installed_config, _ = lab_up("binst", nodes, "installed", cwd)
    engine_config, _ = lab_up("bengn", nodes, "bare", cwd, engine=True)
    try:
        for config in (bare_config, installed_config, engine_config):
            doctor(config, cwd)  # warm all (ssh masters, page cache); not counted
        first, cached, installed, in_engine = [], [], [], []
        for _ in range(rounds):
            forget_code(bare_dir)
            first.append(doctor(bare_config, cwd))
            cached.append(doctor(bare_config, cwd))
            installed.append(doctor(installed_config, cwd))
            in_engine.append(doctor(engine_config, cwd))
    finally:
        for name in ("bbare", "binst", "bengn"):
            run([HALO, "lab", "down", "--name", name], cwd)
    ratio = statistics.median(cached) / statistics.median(installed)
    return {
        "nodes": nodes,
        "bare_first_run": summary(first),
        "bare_cached": summary(cached),
        "installed": summary(installed),
        "bare_cached_in_engine_environment": summary(in_engine),
        "cached_over_installed": round(ratio, 3),
        "within_target": ratio <= TARGET,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as cwd:
        for nodes in (2, 8):
            print(f"{nodes} nodes ...", file=sys.stderr)
            results.append(measure(nodes, args.rounds, cwd))
            print(json.dumps(results[-1]), file=sys.stderr)
    from halo_cluster.nodecode import node_code

    out = {
        "benchmark": "doctor_agentless",
        "target": f"cached bare doctor <= {TARGET:g} x installed doctor (median)",
        "peer": "halo doctor against the same lab with halo installed on the nodes",
        "rounds": args.rounds,
        "node_code_bytes": len(node_code().data),
        "machine": {"cpus": platform.machine(), "python": platform.python_version()},
        "results": results,
    }
    path = HERE / "results" / "doctor_agentless.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
