"""`halo model sync` against rsync and scp on a 4-node lab (needs root and rsync).

Targets (issue: models on every node), on a fabric limited to 1 Gb/s per node (tbf), a
1 GiB model from node1 to the 3 others, median of the runs, side by side in one run:
- halo's fan-out to 3 nodes <= 1.3 x one rsync of the same model to one node;
- <= 0.5 x rsync to the three nodes one after another;
- a re-run with nothing changed <= 2 s;
- after one file changed, only that file is sent (bytes counted on the fabric interfaces).
Without a rate limit: halo's throughput next to rsync's and scp's, over the fabric.
Writes benchmarks/results/model_sync.json.

    sudo .venv/bin/python benchmarks/bench_model_sync.py [--runs 3] [--size-mib 1024]
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
TARGETS = ("node2", "node3", "node4")
FABRIC_IF = "enp194s0np0"
SRC = "/tmp/bench-model"  # inside node1 (its private /tmp)


def sh(argv: list[str], cwd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.strip()[-400:]}")
    return done


def timed(argv: list[str], cwd: str) -> float:
    start = time.perf_counter()
    sh(argv, cwd)
    return time.perf_counter() - start


class Bench:
    def __init__(self, cwd: str, lab: Path) -> None:
        self.cwd, self.lab = cwd, lab
        self.config = str(lab / "halo.toml")
        self.ssh_config = str(lab / "ssh_config")
        self.state = json.loads((lab / "state.json").read_text())

    def on(self, node: str, script: str, check: bool = True) -> str:
        argv = [HALO, "lab", "exec", "--dir", str(self.lab), node, "--", "bash", "-c", script]
        return sh(argv, self.cwd, check).stdout

    def fabric_bytes(self) -> int:
        """Bytes received on the targets' fabric interfaces, together."""
        path = f"/sys/class/net/{FABRIC_IF}/statistics/rx_bytes"
        return sum(int(self.on(n, f"cat {path}").strip()) for n in TARGETS)

    def clear(self) -> None:
        for node in TARGETS:
            self.on(node, "rm -rf /var/lib/halo/models/m /var/lib/halo/models/r")

    def halo_sync(self) -> float:
        argv = [HALO, "model", "sync", f"node1:{SRC}", "--name", "m", "--config", self.config]
        return timed([*argv, "--nodes", ",".join(TARGETS), "--json"], self.cwd)

    def copy(self, tool: str, node: str) -> float:
        """rsync or scp from node1 to ``node`` over its fabric address (the ssh_config's
        NODE-fabric alias)."""
        ssh = f"ssh -F {self.ssh_config}"
        dest = f"{node}-fabric:/var/lib/halo/models/r"
        if tool == "rsync":
            command = f"rsync -a --whole-file -e '{ssh}' {SRC}/ {dest}/"
        else:
            command = (
                f"scp -O -q -r -F {self.ssh_config} {SRC} {dest}"  # -O: the lab sshd has no sftp
            )
        start = time.perf_counter()  # from here: 'lab exec' itself adds a few ms
        self.on("node1", command)
        return time.perf_counter() - start

    def rate(self, rate: str | None) -> None:
        """tbf on every node's fabric link both ways, or none."""
        for node in self.state["nodes"]:
            for prefix, device in (
                (["ip", "netns", "exec", node["netns"]], FABRIC_IF),
                ([], node["host_fabric_veth"]),
            ):
                sh([*prefix, "tc", "qdisc", "del", "dev", device, "root"], self.cwd, check=False)
                if rate:
                    args = ["tc", "qdisc", "add", "dev", device, "root", "tbf", "rate", rate]
                    sh([*prefix, *args, "burst", "1250000", "latency", "100ms"], self.cwd)


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size-mib", type=int, default=1024)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (halo lab)")
    with tempfile.TemporaryDirectory() as cwd:
        lab = Path(cwd) / "lab"
        sh([HALO, "lab", "up", "--name", "bsync", "--dir", str(lab), "--nodes", "4",
            "--no-engine", "--no-llama-cpp", "--fabric-rate", "1gbit"], cwd)  # fmt: skip
        bench = Bench(cwd, lab)
        try:
            result = run(bench, args.runs, args.size_mib)
        finally:
            sh([HALO, "lab", "down", "--dir", str(lab)], cwd, check=False)
    out = HERE / "results" / "model_sync.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["met"], indent=2))


def run(bench: Bench, runs: int, size_mib: int) -> dict[str, object]:
    files = 4
    per = size_mib // files
    bench.on(
        "node1",
        f"mkdir -p {SRC} && for i in $(seq 1 {files}); do head -c {per}M /dev/urandom > "
        f"{SRC}/part-$i.safetensors; done && echo '{{\"n\": 1}}' > {SRC}/config.json",
    )
    limited: dict[str, list[float]] = {"halo": [], "rsync_one": [], "rsync_three": []}
    cold = None
    for index in range(runs):
        bench.clear()
        took = bench.halo_sync()
        if index == 0:
            cold = took  # includes hashing 1 GiB on node1 (kept for the next runs)
        limited["halo"].append(took)
        bench.clear()
        limited["rsync_one"].append(bench.copy("rsync", "node2"))
        bench.clear()
        limited["rsync_three"].append(sum(bench.copy("rsync", n) for n in TARGETS))
    bench.clear()
    bench.halo_sync()
    noop = [bench.halo_sync() for _ in range(runs)]
    bench.on("node1", f"echo '{{\"n\": 2}}' > {SRC}/config.json")
    before = bench.fabric_bytes()
    changed_s = bench.halo_sync()
    changed_bytes = bench.fabric_bytes() - before

    bench.rate(None)
    free: dict[str, list[float]] = {"halo": [], "rsync": [], "scp": []}
    for _ in range(runs):
        bench.clear()
        free["halo"].append(bench.halo_sync())
        bench.clear()
        free["rsync"].append(bench.copy("rsync", "node2"))
        bench.clear()
        free["scp"].append(bench.copy("scp", "node2"))
    size = per * files * (1 << 20)
    m = {k: median(v) for k, v in limited.items()}
    met = {
        "fan_out_vs_one_rsync": round(m["halo"] / m["rsync_one"], 3),
        "fan_out_vs_one_rsync_target": 1.3,
        "fan_out_vs_three_rsyncs": round(m["halo"] / m["rsync_three"], 3),
        "fan_out_vs_three_rsyncs_target": 0.5,
        "noop_s": median(noop),
        "noop_target_s": 2.0,
        "changed_file_fabric_bytes": changed_bytes,
        "changed_file_bytes": len('{"n": 2}\n'),
    }
    met["met"] = bool(
        met["fan_out_vs_one_rsync"] <= 1.3
        and met["fan_out_vs_three_rsyncs"] <= 0.5
        and met["noop_s"] <= 2.0
        and changed_bytes < 256 * 1024
    )
    return {
        "benchmark": "model_sync",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "model": {"files": files + 1, "bytes": size},
        "fabric_1gbit": {
            "runs": limited,
            "median_s": m,
            "halo_cold_s": round(cold or 0.0, 3),
            "note": "halo to 3 nodes (chain) vs rsync -a --whole-file over ssh from node1 to "
            "node2's fabric address, and to node2, node3, node4 one after another",
        },
        "noop_s": noop,
        "changed_one_file": {"seconds": round(changed_s, 3), "fabric_rx_bytes": changed_bytes},
        "unlimited": {
            "runs": free,
            "median_s": {k: median(v) for k, v in free.items()},
            "throughput_mb_s": {
                "halo_3_nodes": round(size / median(free["halo"]) / 1e6, 1),
                "rsync_1_node": round(size / median(free["rsync"]) / 1e6, 1),
                "scp_1_node": round(size / median(free["scp"]) / 1e6, 1),
            },
        },
        "met": met,
    }


if __name__ == "__main__":
    main()
