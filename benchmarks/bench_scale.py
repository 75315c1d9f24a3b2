"""halo at lab scale, side by side with the bare tools in one run (needs root and the engine
environment, `make engine`):

- `halo lab up` and `halo lab down` for 2, 8, 16 and 32 nodes;
- on 32 nodes, `halo doctor` against a bare parallel `ssh` loop that runs the same node-side
  work (each node's inventory command, and its host's pings to every peer with `ethtool`,
  both at once, every node at once), and halo doctor's peak memory at 2, 8, 16 and 32 nodes;
- `halo status` on 32 nodes with Ray up against bare `ssh` to the head running the same
  node command (Ray's node table) in the same environment;
- `halo up` on 16 nodes against a bare sequence of `ray start`: every node's own start
  script, as `halo up` wrote it (the same environment), head first, then each worker,
  then a wait until the head's table has all 16;
- switchless fabrics: `halo lab up`/`down` of a ring of 8 and 32 nodes and a mesh of 8
  (28 cables), and on the 32-node ring `halo setup --apply` (every cable, identity, route
  and forwarding, node by node) and `halo doctor` (every cable and every pair of
  identities with jumbo frames: 992 paths).

Targets (issue 28): doctor and status on 32 nodes <= 3 s each and <= 1.5x the bare loop;
up on 16 nodes <= 1.5x the bare sequence. Medians of the runs. Writes
benchmarks/results/scale.json.

    sudo .venv/bin/python benchmarks/bench_scale.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HALO = str(Path(sys.executable).parent / "halo")
TARGET_S, TARGET_RATIO = 3.0, 1.5


# halo runs as installed: its modules' bytecode cached (pip compiles it at install). An
# environment that forbids the cache (PYTHONDONTWRITEBYTECODE, as some sandboxes set) would
# make every halo command compile its ~200 modules again, a cost no installed halo pays.
HALO_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(argv: list[str], cwd: Path, check: bool = True) -> float:
    """Seconds ``argv`` took; it must succeed (doctor and status: exit 1 is a finding)."""
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, env=HALO_ENV)
    took = time.perf_counter() - start
    findings = argv[1] in ("doctor", "status") and done.returncode == 1
    if check and done.returncode != 0 and not findings:
        raise SystemExit(f"{' '.join(argv)}: {(done.stderr or done.stdout)[-600:]}")
    return took


def peak_rss_mb(argv: list[str], cwd: Path) -> float:
    done = subprocess.run(["/usr/bin/time", "-f", "%M", *argv], cwd=cwd, capture_output=True,
                          text=True, check=False, env=HALO_ENV)  # fmt: skip
    return round(int(done.stderr.strip().splitlines()[-1]) / 1024, 1)


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def lab_cycles(work: Path, sizes: list[int], runs: int, topology: str = "switch") -> dict[str, Any]:
    found: dict[str, Any] = {}
    for nodes in sizes:
        ups, downs = [], []
        for run in range(runs):
            lab = work / f"cyc{topology}{nodes}-{run}"
            up = [HALO, "lab", "up", "--name", "scyc", "--dir", str(lab), "--nodes", str(nodes),
                  "--no-engine", "--no-llama-cpp", "--topology", topology]  # fmt: skip
            ups.append(timed(up, work))
            downs.append(timed([HALO, "lab", "down", "--dir", str(lab)], work))
        found[str(nodes)] = {
            "up_s": [round(t, 3) for t in ups],
            "down_s": [round(t, 3) for t in downs],
            "up_median_s": median(ups),
            "down_median_s": median(downs),
        }
        print(f"lab {topology} {nodes:2} nodes: up {median(ups):.2f} s, "
              f"down {median(downs):.2f} s", file=sys.stderr)  # fmt: skip
    return found


FABRIC_STEPS = ("fabric_links", "fabric_identity", "fabric_routes", "fabric_forwarding")


def routed_32(work: Path, runs: int) -> dict[str, Any]:
    """A 32-node ring: setup --apply on every node, then the doctor (median of ``runs``)."""
    lab = work / "ring32"
    config = str(lab / "halo.toml")
    timed([HALO, "lab", "up", "--name", "sring", "--dir", str(lab), "--nodes", "32",
           "--topology", "ring", "--no-engine", "--no-llama-cpp"], work)  # fmt: skip
    try:
        nodes = [a for i in range(1, 33) for a in ("--node", f"node{i}")]
        steps = [a for s in FABRIC_STEPS for a in ("--step", s)]
        setup_s = timed([HALO, "setup", "--config", config, *nodes, *steps, "--apply", "--yes",
                         "--json"], work)  # fmt: skip
        doctors = [timed([HALO, "doctor", "--config", config], work) for _ in range(runs + 1)]
        done = subprocess.run([HALO, "doctor", "--config", config, "--json"], cwd=work,
                              capture_output=True, text=True, check=False)  # fmt: skip
        findings = json.loads(done.stdout)["cluster"]["findings"]
        reach = next(f["summary"] for f in findings if f["check"] == "fabric.reach")
    finally:
        timed([HALO, "lab", "down", "--dir", str(lab)], work, check=False)
    print(f"ring 32: setup {setup_s:.1f} s, doctor {median(doctors[1:]):.2f} s ({reach})",
          file=sys.stderr)  # fmt: skip
    return {"setup_apply_s": round(setup_s, 2), "doctor_s": [round(t, 3) for t in doctors[1:]],
            "doctor_median_s": median(doctors[1:]), "doctor_exit": done.returncode,
            "fabric_reach": reach}  # fmt: skip


class Bare:
    """The same node-side work as halo's, over plain ssh with the lab's ssh_config."""

    def __init__(self, lab: Path) -> None:
        from halo_cluster.client.node import ssh_clients
        from halo_cluster.config import load_config

        self.lab = lab
        self.config = load_config(lab / "halo.toml")
        self.clients = ssh_clients(self.config)

    def ssh(self, node: str, argv: list[str], script: str | None = None) -> None:
        command = ["ssh", "-F", str(self.lab / "ssh_config"), node, shlex.join(argv)]
        done = subprocess.run(command, input=script, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"bare: {argv[:3]} on {node}: {(done.stderr or done.stdout)[-300:]}")

    def node_argv(self, name: str, *args: str) -> list[str]:
        """A node-side command as halo runs it there: inside the node's exec_prefix."""
        node = next(n for n in self.config.nodes if n.name == name)
        return [*node.exec_prefix, *self.clients[name].command(*args)]

    def doctor(self) -> float:
        from halo_cluster.cluster.gather import ethtool_script, ping_script
        from halo_cluster.wire.args import inventory_args

        def one(node: Any) -> None:
            peers = [p.fabric_address for p in self.config.nodes if p.name != node.name]
            host = ping_script(peers) + ethtool_script(node.fabric_address)
            with ThreadPoolExecutor(2) as pool:
                inventory = pool.submit(
                    self.ssh,
                    node.name,
                    self.node_argv(node.name, *inventory_args(versions=True)),
                )
                pool.submit(self.ssh, node.name, ["bash", "-s"], host).result()
                inventory.result()

        start = time.perf_counter()
        with ThreadPoolExecutor(len(self.config.nodes)) as pool:
            list(pool.map(one, self.config.nodes))
        return time.perf_counter() - start

    def status(self) -> float:
        """What halo status asks: every node whether its raylet runs (at once), then the
        head's Ray node table in Ray's environment."""
        from halo_cluster.ray.auth import ray_env
        from halo_cluster.runner.quote import node_script
        from halo_cluster.wire.args import ray_nodes_args

        head = self.config.head
        script = node_script(ray_env(self.config), self.node_argv(head.name, *ray_nodes_args()))
        start = time.perf_counter()
        with ThreadPoolExecutor(len(self.config.nodes)) as pool:
            pgrep = ["pgrep", "-f", "raylet"]
            list(pool.map(lambda n: self.ssh(n.name, [*n.exec_prefix, *pgrep]), self.config.nodes))
        self.ssh(head.name, ["bash", "-s"], script)
        return time.perf_counter() - start


def start_scripts(lab: Path, nodes: list[str]) -> dict[str, str]:
    """Each node's Ray start script as `halo up` kept it."""
    found = {}
    for node in nodes:
        done = subprocess.run(
            ["ssh", "-F", str(lab / "ssh_config"), node,
             'cat "${XDG_STATE_HOME:-$HOME/.local/state}"/halo/ray-start-*.sh'],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        found[node] = done.stdout
    return found


def bare_up(bare: Bare, scripts: dict[str, str]) -> float:
    """Head first, then each worker (as halo up does: simultaneous joins race in Ray), then
    the head's node table until every node is alive."""
    from halo_cluster.ray.auth import ray_env
    from halo_cluster.runner.quote import node_script
    from halo_cluster.wire.args import ray_nodes_args

    addresses = [n.fabric_address or "" for n in bare.config.nodes]
    head = bare.config.head
    wait = bare.node_argv(head.name, *ray_nodes_args(wait=addresses, timeout=300))
    start = time.perf_counter()
    for node, script in scripts.items():
        bare.ssh(node, ["bash", "-s"], script)
    bare.ssh(head.name, ["bash", "-s"], node_script(ray_env(bare.config), wait))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--up-runs", type=int, default=2)
    args = parser.parse_args()
    from halo_cluster.config import default_engine

    if default_engine() is None:
        raise SystemExit("no engine environment: make engine")
    started = time.time()
    work = Path(tempfile.mkdtemp(prefix="halo-scale-", dir="/var/tmp"))
    result: dict[str, Any] = {"benchmark": "scale", "date": time.strftime("%Y-%m-%d"),
                              "machine": {"cpus": os.cpu_count(), "platform": platform.machine(),
                                          "memory_gib": round(os.sysconf("SC_PAGE_SIZE")
                                                              * os.sysconf("SC_PHYS_PAGES")
                                                              / 2**30, 1)}}  # fmt: skip
    result["lab"] = lab_cycles(work, [2, 8, 16, 32], 3)
    result["lab_ring"] = lab_cycles(work, [8, 32], 3, "ring")
    result["lab_mesh"] = lab_cycles(work, [8], 3, "mesh")
    result["ring_32"] = routed_32(work, args.runs)

    memory: dict[str, float] = {}
    for nodes in (2, 8, 16):
        lab = work / f"mem{nodes}"
        timed([HALO, "lab", "up", "--name", "smem", "--dir", str(lab), "--nodes", str(nodes)], work)
        try:
            timed([HALO, "doctor", "--config", str(lab / "halo.toml")], work)  # connections up
            memory[str(nodes)] = peak_rss_mb([HALO, "doctor", "--config", str(lab / "halo.toml")],
                                             work)  # fmt: skip
        finally:
            timed([HALO, "lab", "down", "--dir", str(lab)], work)

    lab = work / "s32"
    config = str(lab / "halo.toml")
    timed([HALO, "lab", "up", "--name", "s32", "--dir", str(lab), "--nodes", "32"], work)
    try:
        bare = Bare(lab)
        timed([HALO, "doctor", "--config", config], work)  # SSH masters and node code in place
        halo_doctor, bare_doctor = [], []
        for _ in range(args.runs):  # alternately
            halo_doctor.append(timed([HALO, "doctor", "--config", config], work))
            bare_doctor.append(bare.doctor())
        memory["32"] = peak_rss_mb([HALO, "doctor", "--config", config], work)
        print(f"doctor 32: halo {median(halo_doctor):.2f} s, bare {median(bare_doctor):.2f} s",
              file=sys.stderr)  # fmt: skip
        print("halo up on 32 nodes (for status)", file=sys.stderr)
        up32 = timed([HALO, "up", "--config", config], work)
        halo_status, bare_status = [], []
        for _ in range(args.runs):
            halo_status.append(timed([HALO, "status", "--config", config], work))
            bare_status.append(bare.status())
        timed([HALO, "down", "--config", config], work)
    finally:
        timed([HALO, "lab", "down", "--dir", str(lab)], work, check=False)
    print(f"status 32: halo {median(halo_status):.2f} s, bare {median(bare_status):.2f} s",
          file=sys.stderr)  # fmt: skip

    lab = work / "s16"
    config = str(lab / "halo.toml")
    timed([HALO, "lab", "up", "--name", "s16", "--dir", str(lab), "--nodes", "16"], work)
    try:
        bare = Bare(lab)
        names = [n.name for n in bare.config.nodes]
        halo_up, bare_ups = [], []
        for _ in range(args.up_runs):  # alternately
            halo_up.append(timed([HALO, "up", "--config", config], work))
            scripts = start_scripts(lab, names)
            timed([HALO, "down", "--config", config], work)
            bare_ups.append(bare_up(bare, scripts))
            timed([HALO, "down", "--config", config], work)
            print(f"up 16: halo {halo_up[-1]:.1f} s, bare {bare_ups[-1]:.1f} s", file=sys.stderr)
    finally:
        timed([HALO, "lab", "down", "--dir", str(lab)], work, check=False)

    def side(halo: list[float], bare: list[float], absolute: bool) -> dict[str, Any]:
        ratio = statistics.median(halo) / statistics.median(bare)
        met = ratio <= TARGET_RATIO and (not absolute or statistics.median(halo) <= TARGET_S)
        return {"halo_s": [round(t, 3) for t in halo], "bare_s": [round(t, 3) for t in bare],
                "halo_median_s": median(halo), "bare_median_s": median(bare),
                "ratio": round(ratio, 3), "met": met}  # fmt: skip

    result["doctor_32"] = side(halo_doctor, bare_doctor, True)
    result["status_32"] = {**side(halo_status, bare_status, True), "halo_up_32_s": round(up32, 1)}
    result["up_16"] = side(halo_up, bare_ups, False)
    result["doctor_peak_rss_mb"] = memory
    result["targets"] = {"doctor_and_status_32_s": TARGET_S, "ratio": TARGET_RATIO}
    result["took_s"] = round(time.time() - started, 1)
    (HERE / "results" / "scale.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "lab"}, indent=2))
    subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    main()
