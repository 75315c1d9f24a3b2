"""Speed of `halo inventory --json` on a large generated root, and of `halo --help`.

Targets (issue: foundation): inventory <= 300 ms median, --help <= 250 ms median, both as
whole processes on the 2-core test machine. Writes benchmarks/results/inventory.json.

    python benchmarks/bench_inventory.py [--runs 21]
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "fixtures"))

from rootkit import GidEntry, Port, RootBuilder, counters_text, gid_from_ipv4  # noqa: E402

DEVICES, PORTS, GIDS, COUNTERS, INTERFACES = 8, 2, 32, 60, 32


def build_large_root(path: str) -> None:
    b = RootBuilder(path)
    b.system(
        hostname="big",
        os_release="ID=fedora\nVERSION_ID=43\n",
        kernel="6.17.7-300.fc43.x86_64",
        cmdline="ro iommu=pt",
        mem_total_kib=130_000_000,
        memlock="unlimited",
    )
    route = ["Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"]
    trie = ["Main:", "  +-- 0.0.0.0/0 3 0 5"]
    for i in range(INTERFACES):
        dev_index, port_index = divmod(i, PORTS)
        name = f"ens{i}np{port_index}"
        pci = b.pci_device(
            f"pci0000:00/0000:00:{i + 1:02x}.0/0000:{i + 0x20:02x}:00.0", driver="mlx5_core"
        )
        b.netdev(name, pci, mtu=9000, speed=100000)
        address = f"10.{i}.0.1"
        route.append(f"{name}\t0000{i:02X}0A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0")
        trie += [f"        |-- {address}", "           /32 host LOCAL"]
        if dev_index < DEVICES:
            gids = [
                GidEntry(g, gid_from_ipv4(f"10.{i}.{g}.1"), "RoCE v2", name) for g in range(GIDS)
            ]
            values = {f"counter_{c}": c * 1000 + i for c in range(COUNTERS)}
            ports = [
                Port(
                    number=p + 1,
                    gid_table_len=GIDS,
                    gids=gids,
                    hw_counters=counters_text(values),
                    counters=counters_text({"port_xmit_data": 10, "port_rcv_data": 20}),
                )
                for p in range(PORTS)
            ]
            if port_index == 0:
                b.rdma_device(f"mlx5_{dev_index}", pci, fw_ver="22.39.1002", ports=ports)
    b.file("proc/net/route", "\n".join(route) + "\n")
    b.file("proc/net/fib_trie", "\n".join(trie) + "\n")


def timed_runs(argv: list[str], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered), 1),
        "min_ms": round(ordered[0], 1),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
        "runs": len(ordered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    halo = os.path.join(os.path.dirname(sys.executable), "halo")
    with tempfile.TemporaryDirectory() as tmp:
        build_large_root(tmp)
        out = subprocess.run(
            [halo, "inventory", "--root", tmp, "--json"], check=True, capture_output=True
        )
        data = json.loads(out.stdout)
        shape = {
            "rdma_devices": len(data["rdma"]),
            "ports": sum(len(d["ports"]) for d in data["rdma"]),
            "gids_per_port": len(data["rdma"][0]["ports"][0]["gids"]),
            "hw_counters_per_port": len(data["rdma"][0]["ports"][0]["hw_counters"]),
            "interfaces": len(data["net"]),
        }
        timed_runs([halo, "--help"], 3)  # warm the page cache
        inventory = summary(timed_runs([halo, "inventory", "--root", tmp, "--json"], args.runs))
        help_ = summary(timed_runs([halo, "--help"], args.runs))
    result = {
        "benchmark": "inventory",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "system": platform.platform(),
        },
        "root_shape": shape,
        "inventory_json": {
            **inventory,
            "target_median_ms": 300,
            "met": inventory["median_ms"] <= 300,
        },
        "help": {**help_, "target_median_ms": 250, "met": help_["median_ms"] <= 250},
    }
    path = os.path.join(HERE, "results", "inventory.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
        handle.write("\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
