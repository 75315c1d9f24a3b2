"""The lab as the planner's test bench: real llama.cpp RPC decode over 1, 2, 3 and 4 lab
nodes at fabric rates of 1, 2.5 and 10 Gb/s and unlimited, next to what `halo plan
--hardware lab` predicts for the same grid from `halo lab profile` (one-node runs only).

    sudo .venv/bin/python benchmarks/bench_plan_lab.py [--rounds 3] [--rates off,10gbit,...]

Per cell, measured: the decode rate (llama-bench tg128 on node1, one thread, the engine's
own timing; median of the rounds), and on the fabric the bytes and packets per token each
worker's link carries and the worker's data segments out per token (its replies: the round
trips the host waits for), from the difference between a 32- and a 160-token run (so the
model's load does not count). Predicted: `halo plan --gguf MODEL --engine llama.cpp
--hardware lab --link alpha=A,bw=RATE --nodes N --context 128 --json`, A being the
profile's loopback latency and RATE the lab's tbf rate (the profile's loopback bandwidth
when unlimited).

Targets (issue 27): median absolute error <= 15 % over the grid, and the N-node/1-node
ratio within 15 % (median over the multi-node cells). Writes
benchmarks/results/plan_lab.json.

The lab's nodes share this machine's cores: node1 (the head, llama-bench) on core 0, node2
on core 1, node3 on core 0, node4 on core 1, one thread each, as `halo lab up` binds them.
For a single stream one node computes at a time, so sharing a core costs nothing here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HALO = str(Path(sys.executable).parent / "halo")
FABRIC_IF = "enp194s0np0"
PORT = 50052
TARGET = 0.15


def sh(argv: list[str], timeout: float = 900) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip()[-600:]}")
    return done.stdout


def lab_exec(lab: Path, node: str, *argv: str, timeout: float = 900) -> str:
    return sh([HALO, "lab", "exec", "--dir", str(lab), node, "--", *argv], timeout=timeout)


def counters(lab: Path, nodes: int) -> dict[str, dict[str, int]]:
    """Each worker's fabric counters, and its rpc-server's data segments out."""
    read = "; ".join(
        f"cat /sys/class/net/{FABRIC_IF}/statistics/{c}"
        for c in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")
    )
    found = {}
    for i in range(2, nodes + 1):
        rx, tx, rxp, txp = (int(v) for v in lab_exec(lab, f"node{i}", "sh", "-c", read).split())
        ss = lab_exec(lab, f"node{i}", "ss", "-tinH", "state", "established", f"sport = :{PORT}")
        segs = sum(
            int(word.split(":", 1)[1]) for word in ss.split() if word.startswith("data_segs_out:")
        )
        found[f"node{i}"] = {"rx": rx, "tx": tx, "rxp": rxp, "txp": txp, "segs": segs}
    return found


def bench_args(model: str, addresses: list[str], layers: int, tokens: int, reps: int) -> list[str]:
    from halo_cluster.engines.llama_cpp_argv import offload_layers

    argv = ["taskset", "-c", "0", BENCH, "-m", model, "-p", "0", "-n", str(tokens), "-t", "1"]
    argv += ["-r", str(reps), "-o", "json"]
    if addresses:
        argv += ["--rpc", ",".join(f"{a}:{PORT}" for a in addresses)]
        argv += ["-ngl", str(offload_layers(layers, len(addresses)))]
        argv += ["-ts", "/".join("1" for _ in addresses)]
    return argv


def measure_cell(lab: Path, model: str, addresses: list[str], layers: int, rounds: int) -> dict:
    from halo_cluster.capacity.profile import parse_llama_bench

    nodes = len(addresses) + 1
    rates = []
    for _ in range(rounds):
        out = lab_exec(lab, "node1", *bench_args(model, addresses, layers, 128, 5))
        rates.append(parse_llama_bench(out))
    cell: dict[str, Any] = {
        "tokens_per_s": round(statistics.median(rates), 2),
        "rounds": [round(r, 2) for r in rates],
    }
    if nodes > 1:  # traffic per token: a 160-token run minus a 32-token one
        seen = []
        for tokens in (32, 160):
            before = counters(lab, nodes)
            lab_exec(lab, "node1", *bench_args(model, addresses, layers, tokens, 1), "--no-warmup")
            after = counters(lab, nodes)
            seen.append({n: {k: after[n][k] - before[n][k] for k in after[n]} for n in after})
        per = {n: {k: (seen[1][n][k] - seen[0][n][k]) / 128 for k in seen[0][n]} for n in seen[0]}
        cell["per_token"] = {
            n: {
                "bytes_to_worker": round(v["rx"]),
                "bytes_from_worker": round(v["tx"]),
                "packets": round(v["rxp"] + v["txp"], 1),
                "replies": round(v["segs"], 2),
            }
            for n, v in per.items()
        }
    return cell


def predict(model: str, nodes: int, link: str) -> dict:
    out = sh([HALO, "plan", "--gguf", model, "--engine", "llama.cpp", "--hardware", "lab",
              "--link", link, "--nodes", str(nodes), "--context", "128", "--json"])  # fmt: skip
    row = json.loads(out)["rows"][0]
    return {
        "tokens_per_s": round(row["tokens_per_s"], 2),
        "decode_ms_compute": round(row["decode_ms_compute"], 4),
        "decode_ms_network": round(row["decode_ms_network"], 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rates", default="off,10gbit,2.5gbit,1gbit")
    parser.add_argument("--llama-cpp", default=None)
    args = parser.parse_args()
    from halo_cluster.config import default_llama_cpp, profiles_dir
    from halo_cluster.lab.tiny_model import write_model
    from halo_cluster.lab.tiny_spec import TinyModelSpec

    global BENCH
    build = args.llama_cpp or default_llama_cpp()
    if build is None:
        raise SystemExit("no llama.cpp build: make llama-cpp")
    BENCH = str(Path(build) / "bin" / "llama-bench")
    server = str(Path(build) / "bin" / "ggml-rpc-server")
    rates = args.rates.split(",")

    started = time.time()
    print("profiling this machine (halo lab profile)", file=sys.stderr)
    sh([HALO, "lab", "profile", "--llama-cpp", build, "--json"])
    profile = json.loads((profiles_dir() / "lab.json").read_text())
    alpha = profile["link"]["alpha_us"]

    work = Path(tempfile.mkdtemp(prefix="halo-plan-lab-", dir="/var/tmp"))
    lab = work / "lab"
    servers: list[subprocess.Popen[bytes]] = []
    grid: list[dict[str, Any]] = []
    try:
        spec = TinyModelSpec()
        write_model(work / "tiny", spec, formats=("gguf",))
        model = str(work / "tiny" / "model.gguf")
        sh([HALO, "lab", "up", "--name", "plab", "--dir", str(lab), "--nodes", "4",
            "--no-engine", "--llama-cpp", build])  # fmt: skip
        status = json.loads(sh([HALO, "lab", "status", "--dir", str(lab), "--json"]))
        fabric = {n["name"]: n["fabric_address"] for n in status["nodes"]}
        for i in range(2, 5):
            core = str((i - 1) % 2)
            servers.append(
                subprocess.Popen(
                    [
                        HALO,
                        "lab",
                        "exec",
                        "--dir",
                        str(lab),
                        f"node{i}",
                        "--",
                        "taskset",
                        "-c",
                        core,
                        server,
                        "-H",
                        fabric[f"node{i}"],
                        "-p",
                        str(PORT),
                        "-t",
                        "1",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        time.sleep(2)
        for rate in rates:
            sh([HALO, "lab", "rate", "--dir", str(lab), rate])
            beta = profile["link"]["beta_gbps"] if rate == "off" else None
            link = (
                f"alpha={alpha}us,bw={rate}" if rate != "off" else f"alpha={alpha}us,bw={beta}gbit"
            )
            for nodes in (1, 2, 3, 4):
                addresses = [fabric[f"node{i}"] for i in range(2, nodes + 1)]
                print(f"rate {rate}, {nodes} node(s)", file=sys.stderr)
                cell = measure_cell(lab, model, addresses, spec.layers, args.rounds)
                predicted = predict(model, nodes, link)
                grid.append(
                    {
                        "engine": "llama.cpp",
                        "nodes": nodes,
                        "layout": "single" if nodes == 1 else f"RPC{nodes}",
                        "rate": rate,
                        "link": link,
                        "measured": cell,
                        "predicted": predicted,
                        "error": round(
                            (predicted["tokens_per_s"] - cell["tokens_per_s"])
                            / cell["tokens_per_s"],
                            4,
                        ),
                    }
                )
    finally:
        for process in servers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        subprocess.run([HALO, "lab", "down", "--dir", str(lab)], capture_output=True, check=False)
    # N-node / 1-node ratios, measured and predicted, per rate
    for cell in grid:
        one = next(c for c in grid if c["rate"] == cell["rate"] and c["nodes"] == 1)
        measured = cell["measured"]["tokens_per_s"] / one["measured"]["tokens_per_s"]
        predicted = cell["predicted"]["tokens_per_s"] / one["predicted"]["tokens_per_s"]
        cell["ratio_to_one_node"] = {
            "measured": round(measured, 4),
            "predicted": round(predicted, 4),
            "error": round((predicted - measured) / measured, 4),
        }
    errors = [abs(c["error"]) for c in grid]
    ratio_errors = [abs(c["ratio_to_one_node"]["error"]) for c in grid if c["nodes"] > 1]
    summary = {
        "cells": len(grid),
        "median_abs_error": round(statistics.median(errors), 4),
        "worst_abs_error": round(max(errors), 4),
        "ratio_median_abs_error": round(statistics.median(ratio_errors), 4),
        "ratio_worst_abs_error": round(max(ratio_errors), 4),
    }
    summary["meets_target"] = (
        summary["median_abs_error"] <= TARGET and summary["ratio_median_abs_error"] <= TARGET
    )
    result = {
        "benchmark": "plan_lab",
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.machine()},
        "took_s": round(time.time() - started, 1),
        "profile": profile,
        "targets": {"median_abs_error": TARGET, "ratio_median_abs_error": TARGET},
        "summary": summary,
        "grid": grid,
    }
    out = HERE / "results" / "plan_lab.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    for c in grid:
        r = c["ratio_to_one_node"]
        print(
            f"{c['engine']:9} {c['layout']:6} {c['rate']:7} "
            f"measured {c['measured']['tokens_per_s']:8.1f} "
            f"predicted {c['predicted']['tokens_per_s']:8.1f} ({c['error']:+.1%}); ratio "
            f"{r['measured']:.3f} vs {r['predicted']:.3f}"
        )
    print(json.dumps(summary, indent=2))


BENCH = ""

if __name__ == "__main__":
    main()
