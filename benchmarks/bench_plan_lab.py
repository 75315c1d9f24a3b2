"""The lab as the planner's test bench: real llama.cpp RPC decode over 1, 2, 3 and 4 lab
nodes and vLLM TP=1/2/4, at fabric rates of 1, 2.5 and 10 Gb/s and unlimited, next to what
`halo plan --hardware lab` predicts for the same grid from `halo lab profile` (runs on one
machine only).

    sudo .venv/bin/python benchmarks/bench_plan_lab.py [--rounds 3] [--rates off,10gbit,...]

Per cell, measured: the decode rate (llama-bench tg128 on node1, one thread, the engine's
own timing; median of the rounds), and on the fabric the bytes and packets per token each
worker's link carries and the worker's data segments out per token (its replies: the round
trips the host waits for), from the difference between a 32- and a 160-token run (so the
model's load does not count). Predicted: `halo plan --gguf MODEL --engine llama.cpp
--hardware lab --link alpha=A,bw=RATE --nodes N --context 128 --json`, A being the
profile's loopback latency and RATE the lab's tbf rate (the profile's loopback bandwidth
when unlimited).

vLLM TP=1/2/4 on the first 1, 2, 4 nodes: per round and layout `halo serve --executor mp
--no-supervise`, then per rate `halo bench serve` at concurrency 1 (its p50 time per output
token); predicted from the profile's TP=1 and TP=2 runs on one machine (docs/plan.md).
`--engines llama.cpp` or `vllm` runs one grid and keeps the other's committed cells.

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
    """Each worker's fabric counters, and the TCP data segments it sent (TcpExt
    TCPOrigDataSent of its namespace: only the rpc-server talks there)."""
    read = "; ".join(
        f"cat /sys/class/net/{FABRIC_IF}/statistics/{c}"
        for c in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")
    )
    found = {}
    for i in range(2, nodes + 1):
        out = lab_exec(lab, f"node{i}", "sh", "-c", f"{read}; cat /proc/net/netstat")
        lines = out.splitlines()
        rx, tx, rxp, txp = (int(v) for v in lines[:4])
        segs = 0
        for names, values in zip(lines[4::2], lines[5::2], strict=False):
            if names.startswith("TcpExt:"):
                table = dict(zip(names.split()[1:], values.split()[1:], strict=True))
                segs = int(table["TCPOrigDataSent"])
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


def tg_rate(lab: Path, model: str, addresses: list[str], layers: int) -> float:
    from halo_cluster.capacity.profile import parse_llama_bench

    return parse_llama_bench(lab_exec(lab, "node1", *bench_args(model, addresses, layers, 128, 3)))


def traffic(lab: Path, model: str, addresses: list[str], layers: int) -> dict[str, Any]:
    """Per token and worker: a 160-token run minus a 32-token one (the load cancels)."""
    nodes = len(addresses) + 1
    seen = []
    for tokens in (32, 160):
        before = counters(lab, nodes)
        lab_exec(lab, "node1", *bench_args(model, addresses, layers, tokens, 1), "--no-warmup")
        after = counters(lab, nodes)
        seen.append({n: {k: after[n][k] - before[n][k] for k in after[n]} for n in after})
    per = {n: {k: (seen[1][n][k] - seen[0][n][k]) / 128 for k in seen[0][n]} for n in seen[0]}
    return {
        n: {
            "bytes_to_worker": round(v["rx"]),
            "bytes_from_worker": round(v["tx"]),
            "packets": round(v["rxp"] + v["txp"], 1),
            "data_segments_from_worker": round(v["segs"], 2),
        }
        for n, v in per.items()
    }


def llama_cpp_cells(
    work: Path, build: str, server: str, model: str, layers: int, rates: list[str], rounds: int
) -> dict[tuple[str, int], dict[str, Any]]:
    """llama-bench on node1 with 0-3 ggml-rpc-servers on nodes 2-4, every rate, every round."""
    lab = work / "lab"
    servers: list[subprocess.Popen[bytes]] = []
    cells: dict[tuple[str, int], dict[str, Any]] = {}
    try:
        sh([HALO, "lab", "up", "--name", "plab", "--dir", str(lab), "--nodes", "4",
            "--no-engine", "--llama-cpp", build])  # fmt: skip
        status = json.loads(sh([HALO, "lab", "status", "--dir", str(lab), "--json"]))
        fabric = {n["name"]: n["fabric_address"] for n in status["nodes"]}
        for i in range(2, 5):  # node i on core (i - 1) % 2, as halo lab up binds its engines
            argv = ["taskset", "-c", str((i - 1) % 2), server, "-H", fabric[f"node{i}"],
                    "-p", str(PORT), "-t", "1"]  # fmt: skip
            servers.append(
                subprocess.Popen(
                    [HALO, "lab", "exec", "--dir", str(lab), f"node{i}", "--", *argv],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        time.sleep(2)
        # rounds interleave every cell, so that a slow minute of the machine spreads out
        for round_ in range(rounds):
            for rate in rates:
                sh([HALO, "lab", "rate", "--dir", str(lab), rate])
                for nodes in (1, 2, 3, 4):
                    addresses = [fabric[f"node{i}"] for i in range(2, nodes + 1)]
                    print(f"round {round_ + 1}: rate {rate}, {nodes} node(s)", file=sys.stderr)
                    cell = cells.setdefault((rate, nodes), {"rounds": []})
                    cell["rounds"].append(round(tg_rate(lab, model, addresses, layers), 2))
                    if round_ == 0 and nodes > 1:
                        cell["per_token"] = traffic(lab, model, addresses, layers)
    finally:
        for process in servers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        subprocess.run([HALO, "lab", "down", "--dir", str(lab)], capture_output=True, check=False)
    return cells


def predict(engine: str, model: str, checkpoint: str, nodes: int, link: str) -> dict:
    """The planner's row for this engine on ``nodes`` lab nodes (vLLM: TP over all of them)."""
    source = (
        ["--gguf", model] if engine == "llama.cpp" else ["--hf-config", f"{checkpoint}/config.json"]
    )
    out = sh([HALO, "plan", *source, "--engine", engine, "--hardware", "lab", "--link", link,
              "--nodes", str(nodes), "--context", "128", "--json"])  # fmt: skip
    rows = json.loads(out)["rows"]
    row = next(r for r in rows if engine == "llama.cpp" or r["layout"] == f"TP{nodes}")
    return {
        "tokens_per_s": round(row["tokens_per_s"], 2),
        "decode_ms_compute": round(row["decode_ms_compute"], 4),
        "decode_ms_network": round(row["decode_ms_network"], 4),
    }


def vllm_cells(
    work: Path, engine: str, checkpoint: str, rates: list[str], rounds: int, prompts: int
) -> dict[tuple[str, int], dict[str, Any]]:
    """Per round, for N = 1, 2, 4: halo serve --executor mp --tp N (the first N lab nodes,
    one rank and one core each; no supervisor, whose probes would be requests of their
    own), then per rate a halo bench serve at concurrency 1. The rounds go through the
    layouts in turn, so the machine's drift over minutes weighs on each alike."""
    lab = work / "vlab"
    config = str(lab / "halo.toml")
    cells: dict[tuple[str, int], dict[str, Any]] = {}
    try:
        sh([HALO, "lab", "up", "--name", "pvlab", "--dir", str(lab), "--nodes", "4",
            "--engine", engine, "--no-llama-cpp"])  # fmt: skip
        for round_ in range(rounds):
            for tp in (1, 2, 4):
                print(f"round {round_ + 1}: vLLM TP={tp}: halo serve", file=sys.stderr)
                try:
                    sh([HALO, "serve", checkpoint, "--config", config, "--executor", "mp",
                        "--tp", str(tp), "--no-supervise", "--wait", "900", "--json"],
                       timeout=1200)  # fmt: skip
                    for rate in rates:
                        sh([HALO, "lab", "rate", "--dir", str(lab), rate])
                        print(f"round {round_ + 1}: vLLM TP={tp}, rate {rate}", file=sys.stderr)
                        out = work / f"serve-{tp}-{rate}-{round_}.json"
                        sh([HALO, "bench", "serve", "--config", config, "--concurrency", "1",
                            "--prompts", str(prompts), "--input-len", "16", "--output-len", "64",
                            "--warmup", "1", "--out", str(out)], timeout=1200)  # fmt: skip
                        level = json.loads(out.read_text())["levels"][0]
                        cell = cells.setdefault((rate, tp), {"rounds": []})
                        cell["rounds"].append(round(1000 / level["tpot_ms"]["p50"], 2))
                finally:
                    subprocess.run([HALO, "stop", "--config", config], capture_output=True,
                                   check=False)  # fmt: skip
    finally:
        subprocess.run([HALO, "lab", "down", "--dir", str(lab)], capture_output=True, check=False)
    return cells


def summarize(grid: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [abs(c["error"]) for c in grid]
    ratios = [abs(c["ratio_to_one_node"]["error"]) for c in grid if c["nodes"] > 1]
    found: dict[str, Any] = {
        "cells": len(grid),
        "median_abs_error": round(statistics.median(errors), 4),
        "worst_abs_error": round(max(errors), 4),
        "ratio_median_abs_error": round(statistics.median(ratios), 4) if ratios else None,
        "ratio_worst_abs_error": round(max(ratios), 4) if ratios else None,
    }
    found["meets_target"] = found["median_abs_error"] <= TARGET and (
        not ratios or found["ratio_median_abs_error"] <= TARGET
    )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rates", default="off,10gbit,2.5gbit,1gbit")
    parser.add_argument("--engines", default="llama.cpp,vllm")
    parser.add_argument("--prompts", type=int, default=8, help="vLLM: requests per cell and round")
    parser.add_argument("--llama-cpp", default=None)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    args = parser.parse_args()
    from halo_cluster.config import default_engine, default_llama_cpp, profiles_dir
    from halo_cluster.lab.tiny_model import write_model
    from halo_cluster.lab.tiny_spec import TinyModelSpec

    global BENCH
    build = args.llama_cpp or default_llama_cpp()
    if build is None:
        raise SystemExit("no llama.cpp build: make llama-cpp")
    BENCH = str(Path(build) / "bin" / "llama-bench")
    server = str(Path(build) / "bin" / "ggml-rpc-server")
    rates = args.rates.split(",")
    engines = args.engines.split(",")

    started = time.time()
    work = Path(tempfile.mkdtemp(prefix="halo-plan-lab-", dir="/var/tmp"))
    spec = TinyModelSpec(layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=4)
    made = write_model(work / "model", spec, formats=("safetensors", "gguf"))
    model = str(work / "model" / "model.gguf")
    checkpoint = str(work / "model")
    engine = default_engine() if "vllm" in engines else None
    print("profiling this machine (halo lab profile, one node)", file=sys.stderr)
    sh([HALO, "lab", "profile", "--llama-cpp", build, "--gguf", model, "--checkpoint", checkpoint,
        *(["--engine", engine] if engine else ["--no-engine"]), "--json"])  # fmt: skip
    profile = json.loads((profiles_dir() / "lab.json").read_text())
    alpha = profile["link"]["alpha_us"]

    cells: dict[tuple[str, str, int], dict[str, Any]] = {}
    if "llama.cpp" in engines:
        found = llama_cpp_cells(work, build, server, model, spec.layers, rates, args.rounds)
        cells.update({("llama.cpp", *key): cell for key, cell in found.items()})
    if engine is not None:
        found = vllm_cells(work, engine, checkpoint, rates, args.rounds, args.prompts)
        cells.update({("vllm", *key): cell for key, cell in found.items()})
    grid: list[dict[str, Any]] = []
    for (name, rate, nodes), cell in cells.items():
        cell["tokens_per_s"] = round(statistics.median(cell["rounds"]), 2)
        bw = f"{profile['link']['beta_gbps']}gbit" if rate == "off" else rate
        link = f"alpha={alpha}us,bw={bw}"
        predicted = predict(name, model, checkpoint, nodes, link)
        layout = f"TP{nodes}" if name == "vllm" else "single" if nodes == 1 else f"RPC{nodes}"
        grid.append(
            {
                "engine": name,
                "nodes": nodes,
                "layout": layout,
                "rate": rate,
                "link": link,
                "measured": cell,
                "predicted": predicted,
                "error": round(
                    (predicted["tokens_per_s"] - cell["tokens_per_s"]) / cell["tokens_per_s"], 4
                ),
            }
        )
    # N-node / 1-node ratios, measured and predicted, per rate
    for cell in grid:
        one = next(
            c
            for c in grid
            if c["engine"] == cell["engine"] and c["rate"] == cell["rate"] and c["nodes"] == 1
        )
        measured = cell["measured"]["tokens_per_s"] / one["measured"]["tokens_per_s"]
        predicted = cell["predicted"]["tokens_per_s"] / one["predicted"]["tokens_per_s"]
        cell["ratio_to_one_node"] = {
            "measured": round(measured, 4),
            "predicted": round(predicted, 4),
            "error": round((predicted - measured) / measured, 4),
        }
    out = HERE / "results" / "plan_lab.json"
    profiles = {name: profile for name in engines}
    if out.is_file():  # an engine not run now keeps its cells, and the profile they used
        kept = json.loads(out.read_text())
        grid += [c for c in kept.get("grid", []) if c["engine"] not in engines]
        before = kept.get("profiles") or dict.fromkeys(
            {c["engine"] for c in kept.get("grid", [])}, kept.get("profile")
        )
        profiles = {**{k: v for k, v in before.items() if k not in engines}, **profiles}
    summary = {"all": summarize(grid)}
    for name in sorted({c["engine"] for c in grid}):
        summary[name] = summarize([c for c in grid if c["engine"] == name])
    result = {
        "benchmark": "plan_lab",
        "model": {
            "layers": spec.layers,
            "hidden": spec.hidden,
            "heads": spec.heads,
            "kv_heads": spec.kv_heads,
            "vocab": spec.vocab,
            "parameters": made.parameters,
            "format": "halo lab model --format both: F16 GGUF (llama.cpp), bf16 safetensors (vLLM)",
        },
        "rounds": args.rounds,
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.machine()},
        "took_s": round(time.time() - started, 1),
        # per engine, the profile its predictions used (measured just before its grid)
        "profiles": profiles,
        "targets": {"median_abs_error": TARGET, "ratio_median_abs_error": TARGET},
        "summary": summary,
        "grid": grid,
    }
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
