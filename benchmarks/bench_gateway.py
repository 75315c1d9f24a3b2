"""The gateway (vllm-router behind halo's key gate) in a 3-node lab with the real engines:
what it costs on the same server, how it rides out a replica's death, whether a bad key
ever reaches an engine, and two deployments behind it at once. Needs root, the llama.cpp
build and (for the vLLM figures) the engine environment. Writes
benchmarks/results/gateway.json.

    sudo .venv/bin/python benchmarks/bench_gateway.py [--runs 3] [--out FILE] [--no-vllm]

Targets (each over --runs runs, the median):

1. Gateway cost: ``halo bench serve`` straight at one replica (its own URL, with the
   cluster's worker key, which every replica requires) against the same replica through
   the gateway (a gateway key), at concurrency 1 and 8. TTFT p50 no more than 2 ms above
   direct; ITL p50 and output tokens/s within 5 % of direct. The deployment has one replica,
   so both sides reach the same server. Which side goes first alternates between runs and
   levels, every invocation has its own seed (no prompt is in the server's prefix cache from
   the other side), the server idles SETTLE_S before each, and the client runs on a node
   that serves nothing (node3 for llama.cpp on node1, node2 for vLLM on node3). llama.cpp
   (tiny GGUF, "llama.cpp single") always; vLLM's CPU build (tiny safetensors, "vllm TP1")
   unless --no-vllm or there is no engine environment. Both sides get prompts of the same
   length: halo bench serve cannot fit them with /tokenize through the gateway (the router
   answers a vLLM-shaped /tokenize 503 "No available workers: 0 prefill, 0 decode", and
   llama-server's shape has no "model" to route by), so it fits them from one probe's usage
   and lands some tokens off input_len, a different number for every seed (about 0.09 ms of
   llama.cpp prefill each here). The gateway side's
   prompts are therefore made again beforehand from its seed (halo's own prompt code, counted
   by the replica's /tokenize, no completion asked) and the direct side asks for their mean
   length; each run checks that the replica matched what the gateway side sent. A run whose
   ITL p50 is under 0.1 ms had its tokens sent in bursts (``streamed`` false): a starved
   server on a small CPU, not the gateway. Every run also records the CPU seconds the key
   gate, the router and the engine spent on it (``cpu_s``, and per output token), and the
   router's own counters (``router``: its retries, its failed sends); a request that failed
   is counted (``errors``, ``first_error``), never retried, and fails ``no_errors``.
   Beside it, not a target (``gateway_cost_by_hop``): the same load from node1 itself,
   straight at the replica, at the router alone (its loopback port, with the worker key) and
   at the key gate, so that what the gateway adds splits into the router's part and the
   gate's (the router and gate sides get seeds whose usage-fitted prompts have the same mean
   length; the direct side asks for it).
2. Failover: a deployment of 2 replicas (node1, node2); this script's own client (threads
   and urllib, non-streaming completions, each request's outcome counted) sends 200
   requests through the gateway at concurrency 4; after the 50th answer node2's llama-server
   is killed (``pkill -f llama-server`` in node2). Failed requests <= 1 (the goal: 0); the
   seconds from the kill until ``halo status --json`` shows the deployment and both replicas
   "serving" again, the killed one with one restart more (its supervisor restarted it,
   settings as shipped) <= 60.
3. Keys: 100 requests with no key, a wrong key or a revoked key (made, then revoked with
   ``halo gateway key revoke``, then used), round robin. Each must be a 401, and none may
   reach an engine: the router's own Prometheus counters on the head
   (``vllm_router_cb_outcomes_total`` summed over workers, and ``vllm_router_requests_total``
   over routes) read before and after must not move. (The gate reads its key file again at
   most once a second, when a request comes: the revoke's own command takes longer than
   that, so the first request after it finds the new file.)
4. Two deployments at once: the 2-replica one and a second one on node3 (vLLM when it runs,
   else llama.cpp), each replica proven by every witness (``halo run --json``'s "proven"),
   both "serving" in ``halo status --json``, each answering one request through the gateway
   with a 200 (once per run).

Every lab and process started here is torn down at the end, also on Ctrl-C, SIGTERM or an
error (``halo stop``, ``halo gateway stop``, ``halo lab down``); what is left on the nodes
before ``lab down`` is recorded. Progress goes to stderr, the result to --out (kept after
each phase, marked incomplete until the end) and to stdout.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HALO = str(Path(sys.executable).parent / "halo")
LAB_NAME = "bgw"
SETTLE_S = 2.0
# an ITL p50 below this: the server sent its tokens in bursts, not as they came (a starved
# API server on a small CPU; bench_serve_vs_vllm.py says more)
STREAMED_ITL_MS = 0.1
METRICS_PORT = 29080  # [gateway] metrics_port as shipped
ROUTER_PORT = 30080  # [gateway] router_port as shipped
LLAMA: dict[str, Any] = {
    "layout": "llama.cpp single",
    "input_len": 128,
    "output_len": 128,
    "prompts": {1: 32, 8: 96},
}
VLLM: dict[str, Any] = {
    "layout": "vllm TP1",
    "input_len": 128,
    "output_len": 64,
    "prompts": {1: 16, 8: 64},
}
TARGETS = {
    "ttft_p50_added_ms": 2.0,
    "within_pct": 5.0,
    "failed_requests": 1,
    "serving_again_s": 60.0,
    "reached_engine": 0,
}
FAILOVER = {"requests": 200, "concurrency": 4, "kill_after": 50, "max_tokens": 64}
KEYS_REQUESTS = 100
RECOVERY_WAIT_S = 240.0
LEFTOVER = (
    "pgrep -af 'llama-server|ggml-rpc-server|vllm::router|gateway.gate|vllm serve|"
    "EngineCore|halo supervise' | grep -v pgrep; true"
)


# Run in a node: CPU seconds (user + system, all threads) of each process there, summed per
# role: the key gate, the router, the engine (llama-server; vLLM's API server and its engine
# core). A process that ended took its seconds with it; none ends during a measured run.
CPU = """
import json, os
ROLES = (("gate", "halo_cluster.gateway.gate"), ("router", "vllm_router"),
         ("router", "vllm::router"), ("engine", "llama-server"), ("engine", "vllm serve"),
         ("engine", "VLLM::"))
tick, found = os.sysconf("SC_CLK_TCK"), {}
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) == os.getpid():  # this script: its own text names every role
        continue
    try:
        stat = open(f"/proc/{pid}/stat").read()
        line = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ")
        line = line.decode(errors="replace")
    except OSError:
        continue
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    role = next((r for r, mark in ROLES if mark in line or name.startswith(mark)), None)
    if role:
        found[role] = found.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / tick
print(json.dumps(found))
"""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sh(
    argv: list[str], check: bool = True, timeout: float = 1200
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    if check and done.returncode != 0:
        shown = " ".join(argv[:6])
        raise SystemExit(f"{shown} … failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return done


def stopped_by_signal(signum: int, _frame: FrameType | None) -> None:
    """SIGTERM as Ctrl-C: the finally blocks tear the lab down."""
    raise KeyboardInterrupt(f"signal {signum}")


# -- the lab -------------------------------------------------------------------------------
class Lab:
    """A 3-node lab, its config, and the halo commands this benchmark runs against it."""

    def __init__(self, root: Path, vllm: bool) -> None:
        self.root, self.vllm = root, vllm
        self.dir = root / "lab"
        self.config = self.dir / "halo.toml"
        self.cluster = ""
        self.nodes: dict[str, dict[str, Any]] = {}

    def up(self) -> None:
        argv = [
            HALO,
            "lab",
            "up",
            "--name",
            LAB_NAME,
            "--dir",
            str(self.dir),
            "--nodes",
            "3",
            "--installed",
            "--json",
        ]
        shown = json.loads(sh(argv + ([] if self.vllm else ["--no-engine"])).stdout)
        self.nodes = {n["name"]: n for n in shown["nodes"]}
        head = self.nodes["node1"]["mgmt_address"]  # where the host (and the clients) reach it
        with self.config.open("a") as config:
            config.write(f'\n[gateway]\nhost = "{head}"\n')
        self.cluster = tomllib.loads(self.config.read_text())["cluster"]["name"]

    def down(self) -> dict[str, str]:
        """Stop every deployment and the gateway, note what is left on each node, remove
        the lab."""
        left: dict[str, str] = {}
        if self.config.exists():
            self.halo("stop", check=False, timeout=300)
            self.halo("gateway", "stop", check=False, timeout=120)
            for node in self.nodes:
                left[node] = self.on(node, LEFTOVER).strip()
        sh([HALO, "lab", "down", "--name", LAB_NAME, "--dir", str(self.dir)], check=False)
        return left

    def halo(
        self, *args: str, check: bool = True, timeout: float = 1200
    ) -> subprocess.CompletedProcess[str]:
        return sh([HALO, *args, "--config", str(self.config)], check=check, timeout=timeout)

    def json_of(self, *args: str, timeout: float = 1200) -> Any:
        return json.loads(self.halo(*args, "--json", timeout=timeout).stdout)

    def view(self, *args: str) -> Any:
        """A status command's JSON: its exit code says how well things are (1 while a
        deployment is degraded), the JSON is there either way."""
        done = self.halo(*args, "--json", check=False, timeout=120)
        try:
            return json.loads(done.stdout)
        except ValueError:
            raise SystemExit(f"halo {' '.join(args)}: no JSON: {done.stderr[-800:]}") from None

    def on(self, node: str, script: str, check: bool = False) -> str:
        return self.exec(node, "bash", "-c", script, check=check)

    def exec(self, node: str, *argv: str, check: bool = False) -> str:
        command = [HALO, "lab", "exec", "--dir", str(self.dir), node, "--", *argv]
        return sh(command, check=check, timeout=600).stdout

    def worker_key_file(self) -> Path:
        return self.dir / ".halo" / f"{self.cluster}.worker.key"

    def state_dir(self, node: str) -> Path:
        return self.dir / "home" / node / ".local" / "state" / "halo"

    # -- deployments and the gateway ------------------------------------------------------
    def deploy(
        self, model: Path, name: str, nodes: str, replicas: int, layout: str
    ) -> dict[str, Any]:
        log(f"halo run {name} on {nodes} ({layout}, {replicas} replica(s))")
        began = time.monotonic()
        found: dict[str, Any] = self.json_of(
            "run",
            str(model),
            "--name",
            name,
            "--nodes",
            nodes,
            "--replicas",
            str(replicas),
            "--layout",
            layout,
        )
        found["took_s"] = round(time.monotonic() - began, 2)
        found.pop("gateway", None)
        if found["state"] != "serving":
            raise SystemExit(f"deployment {name}: {found['state']}: {json.dumps(found)[:800]}")
        return found

    def key(self, name: str) -> tuple[str, Path]:
        """A gateway key: the key, and a 0600 file holding it (for a client in a node)."""
        key = str(self.json_of("gateway", "key", "add", name)["key"])
        path = self.dir / f"{name}.key"
        path.touch(mode=0o600)
        path.write_text(key + "\n")
        return key, path

    def deployment(self, name: str) -> dict[str, Any]:
        status = self.view("status")
        return next(d for d in status["deployments"] if d["name"] == name)

    def router(self) -> dict[str, float]:
        """The router's own counters on the head, each summed over its labels: every outcome
        of every request it sent to a worker, the requests it took, its retries and errors."""
        text = self.on("node1", f"curl -sf 127.0.0.1:{METRICS_PORT}/metrics", check=True)
        found = {
            "cb_outcomes_total": 0.0,
            "requests_total": 0.0,
            "retries_total": 0.0,
            "request_errors_total": 0.0,
        }
        for line in text.splitlines():
            for name in found:
                if line.startswith(f"vllm_router_{name}{{"):
                    found[name] += float(line.rsplit(" ", 1)[1])
        return found

    def cpu(self, nodes: set[str]) -> dict[str, float]:
        """CPU seconds the gateway's processes and the engine have used so far, per role,
        over ``nodes`` (see CPU)."""
        found: dict[str, float] = {}
        for node in sorted(nodes):
            for role, seconds in json.loads(
                self.exec(node, "python3", "-c", CPU, check=True)
            ).items():
                found[role] = found.get(role, 0.0) + seconds
        return found

    def router_healthy(self) -> bool:
        workers = self.view("gateway", "status")["workers"]
        return bool(workers) and all(w["healthy"] for w in workers)

    def engine_argv(self, node: str, pattern: str) -> list[str]:
        return [
            line.split(" ", 1)[1]
            for line in self.on(node, f"pgrep -af '{pattern}'").splitlines()
            if " " in line and "pgrep" not in line
        ]


def until(what: str, check: Callable[[], bool], within_s: float) -> float:
    """Seconds until ``check()`` holds; SystemExit past ``within_s``."""
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > within_s:
            raise SystemExit(f"not within {within_s:g} s: {what}")
        time.sleep(0.5)
    return round(time.monotonic() - began, 2)


# -- target 1: what the gateway costs on the same server -----------------------------------
@dataclass(frozen=True)
class Side:
    """Where one side of the comparison sends its load, with which key."""

    url: str
    key_file: Path


def bench_serve(
    lab: Lab,
    client: str,
    side: Side,
    model: str,
    concurrency: int,
    prompts: int,
    input_len: int,
    output_len: int,
    seed: int,
) -> dict[str, Any]:
    """``halo bench serve`` in ``client``, its key read there from a file (never argv)."""
    options = {
        "--url": side.url,
        "--model": model,
        "--api-key-env": "BENCH_KEY",
        "--concurrency": concurrency,
        "--prompts": prompts,
        "--input-len": input_len,
        "--output-len": output_len,
        "--seed": seed,
        "--out": lab.dir / f"serve-{seed}.json",
    }
    argv = [HALO, "bench", "serve", *(str(x) for pair in options.items() for x in pair), "--json"]
    script = f'export BENCH_KEY="$(cat {side.key_file})"; exec ' + " ".join(f"'{a}'" for a in argv)
    # its exit code is 1 when a request failed: the JSON says which, and is kept
    done = sh(
        [HALO, "lab", "exec", "--dir", str(lab.dir), client, "--", "bash", "-c", script],
        check=False,
        timeout=900,
    )
    try:
        data = json.loads(done.stdout)
    except ValueError:
        raise SystemExit(f"halo bench serve {side.url}: no result: {done.stderr[-800:]}") from None
    level = data["levels"][0]
    return {
        "ttft_p50_ms": level["ttft_ms"]["p50"],
        "itl_p50_ms": level["itl_ms"]["p50"],
        "output_tok_s": level["output_tokens_per_s"],
        "tpot_p50_ms": level["tpot_ms"]["p50"],
        "ttft_mean_ms": level["ttft_ms"]["mean"],
        "e2e_p50_ms": level["e2e_ms"]["p50"],
        "streamed": (level["itl_ms"]["p50"] or 0) >= STREAMED_ITL_MS,
        "requests": level["requests"],
        "errors": level["errors"],
        "first_error": level["first_error"],
        "exit_code": done.returncode,
        "input_len_asked": input_len,
        "input_tokens_per_request": round(
            (level["input_tokens"] or 0) / max(1, level["requests"]), 2
        ),
        "output_tokens": level["output_tokens"],
        "prompt_fit": data["workload"]["prompt_fit"],
        "tokens_from": level["tokens_from"],
        "wall_s": level["wall_s"],
        "seed": seed,
    }


def measured(
    lab: Lab,
    client: str,
    side: Side,
    model: str,
    shape: dict[str, Any],
    concurrency: int,
    input_len: int,
    seed: int,
    where: set[str],
) -> dict[str, Any]:
    """One ``bench_serve`` after SETTLE_S of idle, with the CPU seconds the gateway's processes
    and the engine spent on it (``where``: their nodes; read outside the timed window) and,
    for a run that goes through the router, what its counters say it had to do again."""
    cpu, counters = lab.cpu(where), lab.router()
    time.sleep(SETTLE_S)
    found = bench_serve(
        lab,
        client,
        side,
        model,
        concurrency,
        shape["prompts"][concurrency],
        input_len,
        shape["output_len"],
        seed,
    )
    used = lab.cpu(where)
    found["cpu_s"] = {role: round(used[role] - cpu.get(role, 0.0), 3) for role in used}
    found["router"] = router_delta(counters, lab.router())
    tokens = max(1, found["output_tokens"])
    found["cpu_ms_per_output_token"] = {
        role: round(1000 * seconds / tokens, 4) for role, seconds in found["cpu_s"].items()
    }
    return found


# Run in the client node with halo's Python: the prompts 'halo bench serve --seed S' makes
# when the server has no /tokenize (its usage fallback: the same code, the same draws from the
# same seed), each counted by the replica's own /tokenize (BOS included, as usage counts it).
# /tokenize computes nothing in the KV cache, so no timed prompt is seen before its run.
REPLICATE = """
import json, random, sys, urllib.error, urllib.request
from halo_cluster.bench.serve_prompts import workload
url, key_file, model = sys.argv[1], sys.argv[2], sys.argv[3]
target, prompts = int(sys.argv[4]), int(sys.argv[5])
key = open(key_file).read().strip()
SHAPES = [  # vLLM's /tokenize, then llama-server's
    (lambda text: {"model": model, "prompt": text}, lambda data: data.get("count")),
    (lambda text: {"content": text, "add_special": True}, lambda data: len(data["tokens"])),
]
def ask(body):
    headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    request = urllib.request.Request(url + "/tokenize", json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError:
        return {}
def count(text):
    for shape, read in SHAPES:
        found = ask(shape(text))
        if isinstance(found.get("count"), int) or isinstance(found.get("tokens"), list):
            tokens = read(found)
            if isinstance(tokens, int) and tokens > 0:
                SHAPES[:] = [(shape, read)]  # this server's shape from now on
                return tokens
    raise SystemExit("the replica counts no tokens: " + url)
out = {}
for seed in sys.argv[6].split(","):
    # the gateway's /tokenize fails: fit() draws its words, then the usage probe takes over
    batch, fitted = workload(random.Random(int(seed)), prompts, target, lambda _t: None, count)
    out[seed] = {"fit": fitted, "tokens": [count(p.text) for p in batch]}
print(json.dumps(out))
"""


def prompt_fit(lab: Lab, client: str, side: Side, model: str, seed: int) -> str:
    """How halo bench serve fits its prompts at ``side`` ("tokenize" or "usage"): asked of
    one short run of its own (its prompt is no later run's)."""
    found = bench_serve(lab, client, side, model, 1, 1, 16, 1, seed)
    return str(found["prompt_fit"])


def gateway_lengths(
    lab: Lab,
    client: str,
    direct: Side,
    model: str,
    shape: dict[str, Any],
    seeds: dict[int, list[int]],
) -> dict[int, dict[str, Any]]:
    """Per gateway seed: its prompts' token counts, replicated (see REPLICATE)."""
    script_path = lab.dir / "replicate.py"
    script_path.write_text(REPLICATE)
    found: dict[int, dict[str, Any]] = {}
    for concurrency, mine in seeds.items():
        argv = [
            sys.executable,
            str(script_path),
            direct.url,
            str(direct.key_file),
            model,
            str(shape["input_len"]),
            str(shape["prompts"][concurrency]),
            ",".join(map(str, mine)),
        ]
        answer = json.loads(lab.exec(client, *argv, check=True))
        for seed, row in answer.items():
            tokens = row["tokens"]
            found[int(seed)] = {
                "fit": row["fit"],
                "mean": round(sum(tokens) / len(tokens), 2),
                "min": min(tokens),
                "max": max(tokens),
            }
    return found


def router_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    return {name: round(after[name] - before[name]) for name in after}


def seed_of(base: int, run: int, concurrency: int, side: str) -> int:
    return base + 1000 * (run + 1) + 10 * concurrency + (side == "gateway")


def cost_runs(
    lab: Lab,
    engine: str,
    client: str,
    sides: dict[str, Side],
    model: str,
    shape: dict[str, Any],
    runs: int,
    lengths: dict[int, dict[str, Any]] | None,
    where: set[str],
) -> list[dict[str, Any]]:
    """Per run and level, both sides; the first side alternates. With ``lengths`` (the
    gateway's prompts cannot be fitted by /tokenize), the direct side asks for the mean
    length of the gateway's prompts of the same run and level."""
    rows, base = [], 100_000 if engine == "vllm" else 0
    for run in range(runs):
        for index, concurrency in enumerate((1, 8)):
            first = "direct" if (run + index) % 2 == 0 else "gateway"
            order = [first, "gateway" if first == "direct" else "direct"]
            row: dict[str, Any] = {"run": run + 1, "concurrency": concurrency, "first": first}
            twin = lengths[seed_of(base, run, concurrency, "gateway")] if lengths else None
            for name in order:
                asked = round(twin["mean"]) if twin and name == "direct" else shape["input_len"]
                seed = seed_of(base, run, concurrency, name)
                row[name] = measured(
                    lab, client, sides[name], model, shape, concurrency, asked, seed, where
                )
                shown = {k: row[name][k] for k in ("ttft_p50_ms", "itl_p50_ms", "output_tok_s")}
                log(f"  {engine} run {run + 1} c{concurrency} {name}: {shown}")
            if twin:  # the replica of the gateway's prompts must be the prompts it sent
                sent = row["gateway"]["input_tokens_per_request"]
                row["gateway"]["input_tokens_replicated"] = {
                    **twin,
                    "same_as_sent": abs(twin["mean"] - sent) < 0.01,
                }
            row["delta"] = deltas(row["direct"], row["gateway"])
            rows.append(row)
    return rows


def median_of(values: Iterable[float | None], digits: int = 3) -> float | None:
    """The median of the values there are (a run whose every request failed has none)."""
    known = [v for v in values if v is not None]
    return round(statistics.median(known), digits) if known else None


def deltas(direct: dict[str, Any], gateway: dict[str, Any]) -> dict[str, float | None]:
    return {
        "ttft_p50_added_ms": difference(direct["ttft_p50_ms"], gateway["ttft_p50_ms"]),
        "itl_p50_ratio": quotient(gateway["itl_p50_ms"], direct["itl_p50_ms"]),
        "output_tok_s_ratio": quotient(gateway["output_tok_s"], direct["output_tok_s"]),
    }


def difference(base: float | None, other: float | None) -> float | None:
    return None if base is None or other is None else round(other - base, 3)


def quotient(top: float | None, bottom: float | None) -> float | None:
    return None if top is None or not bottom else round(top / bottom, 4)


def cpu_medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Per role, the median over ``runs`` of its CPU milliseconds per output token."""
    roles = sorted({role for r in runs for role in r["cpu_ms_per_output_token"]})
    return {
        role: round(statistics.median(r["cpu_ms_per_output_token"].get(role, 0.0) for r in runs), 4)
        for role in roles
    }


def cost_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per level: each side's medians, their deltas (the target), and the median of the
    runs' own (paired) deltas beside them."""
    keys = (
        "ttft_p50_ms",
        "itl_p50_ms",
        "output_tok_s",
        "tpot_p50_ms",
        "e2e_p50_ms",
        "input_tokens_per_request",
    )
    out: dict[str, Any] = {}
    for concurrency in (1, 8):
        mine = [r for r in rows if r["concurrency"] == concurrency]
        median = {
            side: {k: median_of(r[side][k] for r in mine) for k in keys}
            for side in ("direct", "gateway")
        }
        delta = deltas(median["direct"], median["gateway"])
        pct = TARGETS["within_pct"] / 100
        ttft, itl, rate = (delta[k] for k in delta)
        checks = {
            "ttft_p50_added_le_2ms": ttft is not None and ttft <= TARGETS["ttft_p50_added_ms"],
            "itl_p50_within_5pct": itl is not None and abs(itl - 1) <= pct,
            "output_tok_s_within_5pct": rate is not None and abs(rate - 1) <= pct,
            "no_errors": all(r[s]["errors"] == 0 for r in mine for s in ("direct", "gateway")),
        }
        out[f"c{concurrency}"] = {
            "median": median,
            "delta_of_medians": delta,
            "median_of_run_deltas": {k: median_of((r["delta"][k] for r in mine), 4) for k in delta},
            "failed_requests": {s: [r[s]["errors"] for r in mine] for s in ("direct", "gateway")},
            "streamed_runs": {
                s: sum(r[s]["streamed"] for r in mine) for s in ("direct", "gateway")
            },
            "cpu_ms_per_output_token": {
                s: cpu_medians([r[s] for r in mine]) for s in ("direct", "gateway")
            },
            "checks": checks,
            "met": all(checks.values()),
        }
    return out


def gateway_cost(
    lab: Lab,
    engine: str,
    client: str,
    deployed: dict[str, Any],
    gateway_url: str,
    gateway_key: tuple[str, Path],
    shape: dict[str, Any],
    runs: int,
) -> dict[str, Any]:
    log(f"target 1, gateway cost on {engine}: client in {client}")
    base, model = 100_000 if engine == "vllm" else 0, deployed["name"]
    sides = {
        "direct": Side(deployed["replicas"][0]["url"], lab.worker_key_file()),
        "gateway": Side(gateway_url, gateway_key[1]),
    }
    lengths, fit = None, prompt_fit(lab, client, sides["gateway"], model, base + 999)
    if fit != "tokenize":
        seeds = {c: [seed_of(base, r, c, "gateway") for r in range(runs)] for c in (1, 8)}
        lengths = gateway_lengths(lab, client, sides["direct"], model, shape, seeds)
        log(f"  the gateway's prompts (no /tokenize through it): {lengths}")
    where = {"node1", deployed["replicas"][0]["nodes"][0]}  # the gateway's node, the server's
    rows = cost_runs(lab, engine, client, sides, model, shape, runs, lengths, where)
    summary = cost_summary(rows)
    return {
        "engine": engine,
        "layout": shape["layout"],
        "server_node": deployed["replicas"][0]["nodes"][0],
        "client_node": client,
        "direct_url": sides["direct"].url,
        "gateway_url": gateway_url,
        "workload": {
            "input_len": shape["input_len"],
            "output_len": shape["output_len"],
            "prompts": shape["prompts"],
            "warmup_requests": 1,
            "settle_s_before_each": SETTLE_S,
            "prompt_lengths": (
                "both sides fitted by /tokenize to input_len"
                if lengths is None
                else "the gateway side fitted by usage (no /tokenize through the gateway); "
                "the direct side asks for the mean of the gateway's prompts of the same run "
                "(input_tokens_replicated, checked against the run's own input tokens)"
            ),
        },
        "runs": rows,
        "levels": summary,
        "met": all(level["met"] for level in summary.values()),
    }


# -- beside target 1: which hop costs what --------------------------------------------------
def matched_seeds(
    lab: Lab,
    client: str,
    direct: Side,
    model: str,
    shape: dict[str, Any],
    concurrency: int,
    runs: int,
) -> list[tuple[int, int, int]]:
    """``runs`` pairs of seeds whose usage-fitted prompts have (nearly) the same mean length,
    one for the router side and one for the gateway side: (length, seed, seed)."""
    candidates = [500_000 + 1000 * concurrency + i for i in range(8 * runs)]
    found = gateway_lengths(lab, client, direct, model, shape, {concurrency: candidates})
    ranked = sorted(candidates, key=lambda seed: found[seed]["mean"])
    gaps = sorted(
        (found[b]["mean"] - found[a]["mean"], a, b) for a, b in itertools.pairwise(ranked)
    )
    pairs: list[tuple[int, int, int]] = []
    used: set[int] = set()
    for _gap, a, b in gaps:
        if a not in used and b not in used and len(pairs) < runs:
            used |= {a, b}
            pairs.append((round((found[a]["mean"] + found[b]["mean"]) / 2), a, b))
    return pairs


def decomposition(
    lab: Lab,
    deployed: dict[str, Any],
    gateway_url: str,
    gateway_key: Path,
    shape: dict[str, Any],
    runs: int,
) -> dict[str, Any]:
    """Not a target: the client on the head itself, straight at the replica, at the router
    (its loopback port, with the worker key) and at the key gate, so that what the gateway
    adds splits into the router's part and the gate's. Which side goes first rotates."""
    log("beside target 1: direct, router only, router + key gate (client on node1)")
    sides = {
        "direct": Side(deployed["replicas"][0]["url"], lab.worker_key_file()),
        "router": Side(f"http://127.0.0.1:{ROUTER_PORT}", lab.worker_key_file()),
        "gateway": Side(gateway_url, gateway_key),
    }
    model, rows = deployed["name"], []
    for concurrency in (1, 8):
        pairs = matched_seeds(lab, "node1", sides["direct"], model, shape, concurrency, runs)
        for run, (length, router_seed, gateway_seed) in enumerate(pairs):
            names = ["direct", "router", "gateway"]
            order = names[run % 3 :] + names[: run % 3]
            seeds = {
                "direct": 600_000 + 1000 * concurrency + run,
                "router": router_seed,
                "gateway": gateway_seed,
            }
            row: dict[str, Any] = {"run": run + 1, "concurrency": concurrency, "order": order}
            for name in order:
                asked = length if name == "direct" else shape["input_len"]
                row[name] = measured(
                    lab,
                    "node1",
                    sides[name],
                    model,
                    shape,
                    concurrency,
                    asked,
                    seeds[name],
                    {"node1"},
                )
                shown = {k: row[name][k] for k in ("ttft_p50_ms", "itl_p50_ms", "output_tok_s")}
                log(f"  c{concurrency} run {run + 1} {name}: {shown}")
            rows.append(row)
    return {"client_node": "node1", "runs": rows, "levels": hop_summary(rows)}


def hop_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for concurrency in (1, 8):
        mine = [r for r in rows if r["concurrency"] == concurrency]
        median = {
            side: {
                k: median_of(r[side][k] for r in mine)
                for k in ("ttft_p50_ms", "itl_p50_ms", "output_tok_s", "input_tokens_per_request")
            }
            for side in ("direct", "router", "gateway")
        }
        out[f"c{concurrency}"] = {
            "median": median,
            "cpu_ms_per_output_token": {
                side: cpu_medians([r[side] for r in mine])
                for side in ("direct", "router", "gateway")
            },
            "ttft_p50_added_ms": {
                "router": difference(
                    median["direct"]["ttft_p50_ms"], median["router"]["ttft_p50_ms"]
                ),
                "key_gate": difference(
                    median["router"]["ttft_p50_ms"], median["gateway"]["ttft_p50_ms"]
                ),
            },
        }
    return out


# -- the client of targets 2-4 -------------------------------------------------------------
@dataclass
class Outcome:
    index: int
    started: float
    ended: float
    status: int
    ok: bool
    completion_tokens: int | None
    error: str | None


def ask(
    url: str, key: str | None, model: str, max_tokens: int, index: int = 0, timeout: float = 120
) -> Outcome:
    """One non-streaming completion; ok: a 200 whose JSON has a choice."""
    words = random.Random(index).choices(("the", "river", "stone", "light", "music"), k=24)
    body = json.dumps(
        {
            "model": model,
            "prompt": " ".join(words),
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
        }
    ).encode()
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"{url}/v1/completions", body, headers)
    began = time.time()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            data = json.loads(answer.read())
            tokens = (data.get("usage") or {}).get("completion_tokens")
            ok = answer.status == 200 and bool(data.get("choices"))
            return Outcome(index, began, time.time(), answer.status, ok, tokens, None)
    except urllib.error.HTTPError as err:
        text = err.read().decode(errors="replace")[:300]
        return Outcome(index, began, time.time(), err.code, False, None, text)
    except (OSError, ValueError) as err:
        return Outcome(index, began, time.time(), 0, False, None, f"{type(err).__name__}: {err}")


class Load:
    """``total`` requests from ``concurrency`` threads; ``done`` counts the answers."""

    def __init__(self, url: str, key: str, model: str, total: int, concurrency: int) -> None:
        self.url, self.key, self.model, self.total = url, key, model, total
        self.lock = threading.Lock()
        self.next = 0
        self.outcomes: list[Outcome] = []
        self.threads = [threading.Thread(target=self.work, daemon=True) for _ in range(concurrency)]

    def work(self) -> None:
        while True:
            with self.lock:
                if self.next >= self.total:
                    return
                index, self.next = self.next, self.next + 1
            outcome = ask(self.url, self.key, self.model, FAILOVER["max_tokens"], index)
            with self.lock:
                self.outcomes.append(outcome)

    def done(self) -> int:
        with self.lock:
            return len(self.outcomes)

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        for thread in self.threads:
            thread.join()


# -- target 2: failover ----------------------------------------------------------------------
def replica_serving(found: dict[str, Any], index: int, restarts_before: int) -> bool:
    replicas = found["replicas"]
    return (
        found["state"] == "serving"
        and all(r["state"] == "serving" for r in replicas)
        and replicas[index]["restarts"] > restarts_before
    )


def watch_recovery(
    lab: Lab, name: str, index: int, restarts: int, killed_at: float
) -> dict[str, Any]:
    """Poll ``halo status --json`` from the kill until the deployment serves on every replica
    again with the killed one restarted; the states seen on the way are kept."""
    seen: list[dict[str, Any]] = []
    while time.time() - killed_at < RECOVERY_WAIT_S:
        found = lab.deployment(name)
        at = round(time.time() - killed_at, 2)
        states = [found["state"], *(r["state"] for r in found["replicas"])]
        if not seen or seen[-1]["states"] != states:
            seen.append(
                {
                    "after_s": at,
                    "states": states,
                    "restarts": [r["restarts"] for r in found["replicas"]],
                }
            )
        if replica_serving(found, index, restarts):
            return {"serving_again_s": at, "status_seen": seen}
        time.sleep(0.25)
    return {"serving_again_s": None, "status_seen": seen}


def supervisor_serving_s(
    lab: Lab, name: str, index: int, node: str, killed_at: float
) -> float | None:
    """The killed replica's supervisor's own 'serving' after the kill (its state file)."""
    path = lab.state_dir(node) / f"supervise-{lab.cluster}.{name}.{index}.json"
    try:
        history = json.loads(path.read_text())["history"]
    except (OSError, ValueError, KeyError):
        return None
    after = [h["at"] for h in history if h["state"] == "serving" and h["at"] > killed_at]
    return round(after[0] - killed_at, 2) if after else None


def failover_run(lab: Lab, url: str, key: str, name: str) -> dict[str, Any]:
    index, node = 1, "node2"
    until("both replicas healthy in the router", lab.router_healthy, 120)
    restarts = lab.deployment(name)["replicas"][index]["restarts"]
    load = Load(url, key, name, FAILOVER["requests"], FAILOVER["concurrency"])
    before = lab.router()
    began = time.time()
    load.start()
    while load.done() < FAILOVER["kill_after"] and any(t.is_alive() for t in load.threads):
        time.sleep(0.005)
    answered_before_kill = load.done()
    killed_at = time.time()
    lab.exec(node, "pkill", "-f", "llama-server", check=True)
    recovery = watch_recovery(lab, name, index, restarts, killed_at)
    load.join()
    counters = router_delta(before, lab.router())
    healthy_s = until("the router takes the replica back", lab.router_healthy, 120)
    failed = [o for o in load.outcomes if not o.ok]
    return {
        "requests": len(load.outcomes),
        "failed": len(failed),
        "failures": [asdict(o) for o in failed][:20],
        "answered_before_kill": answered_before_kill,
        "kill_after_start_s": round(killed_at - began, 2),
        "load_s": round(max(o.ended for o in load.outcomes) - began, 2),
        "answered_after_kill": sum(1 for o in load.outcomes if o.ok and o.ended > killed_at),
        **recovery,
        "supervisor_serving_s": supervisor_serving_s(lab, name, index, node, killed_at),
        "router_healthy_after_recovery_s": healthy_s,
        "router_during_load_and_recovery": counters,
    }


def failover(lab: Lab, url: str, key: str, deployed: dict[str, Any], runs: int) -> dict[str, Any]:
    log("target 2, failover: 2 replicas, node2's llama-server killed under load")
    rows = []
    for run in range(runs):
        rows.append(failover_run(lab, url, key, deployed["name"]))
        shown = {
            k: rows[-1][k]
            for k in (
                "failed",
                "answered_before_kill",
                "serving_again_s",
                "supervisor_serving_s",
                "load_s",
            )
        }
        log(f"  run {run + 1}: {shown}")
    failed = [r["failed"] for r in rows]
    back = [r["serving_again_s"] for r in rows]
    recovered = [b for b in back if b is not None]
    back_median = statistics.median(recovered) if len(recovered) == len(back) else None
    own = [r["supervisor_serving_s"] for r in rows]
    own_median = statistics.median(o for o in own if o is not None) if None not in own else None
    return {
        "deployment": {
            "name": deployed["name"],
            "replicas": [r["nodes"] for r in deployed["replicas"]],
        },
        "load": {
            **FAILOVER,
            "client": "this script, on the host: threads + urllib, "
            "non-streaming /v1/completions through the gateway",
        },
        "fault": "pkill -f llama-server in node2 (replica 1), supervisors as shipped",
        "runs": rows,
        "failed_median": statistics.median(failed),
        "failed_max": max(failed),
        "serving_again_s_median": back_median,
        "supervisor_serving_s_median": own_median,
    }


# -- target 3: keys --------------------------------------------------------------------------
def gate_reloads(lab: Lab) -> int:
    """How often the gate has read its key file again (its log's lines)."""
    path = lab.state_dir("node1") / f"serve-{lab.cluster}.gateway.log"
    try:
        return sum("keys.json read again" in line for line in path.read_text().splitlines())
    except OSError:
        return 0


def keys_run(lab: Lab, url: str, model: str, good: str, run: int) -> dict[str, Any]:
    revoked, _ = lab.key(f"revoked-{run}")
    lab.halo("gateway", "key", "revoke", f"revoked-{run}")
    wrong = "halo-" + "".join(
        random.Random(run).choices("abcdefghijklmnopqrstuvwxyz0123456789", k=43)
    )
    kinds: list[tuple[str, str | None]] = [("none", None), ("wrong", wrong), ("revoked", revoked)]
    reloads = gate_reloads(lab)
    before = lab.router()
    outcomes = [
        (kinds[i % 3][0], ask(url, kinds[i % 3][1], model, 4, i, timeout=30))
        for i in range(KEYS_REQUESTS)
    ]
    after = lab.router()
    check = ask(url, good, model, 4)  # the gateway still lets a good key through
    statuses: dict[str, dict[str, int]] = {}
    for kind, outcome in outcomes:
        by = statuses.setdefault(kind, {})
        by[str(outcome.status)] = by.get(str(outcome.status), 0) + 1
    return {
        "requests": len(outcomes),
        "refused_401": sum(1 for _, o in outcomes if o.status == 401),
        "statuses_by_key": statuses,
        "reached_engine": round(after["cb_outcomes_total"] - before["cb_outcomes_total"]),
        "router_requests_delta": round(after["requests_total"] - before["requests_total"]),
        "gate_key_file_reloads": gate_reloads(lab) - reloads,
        "good_key_after": check.status,
        "good_key_after_error": check.error,
    }


def keys(lab: Lab, url: str, model: str, good: str, runs: int) -> dict[str, Any]:
    log(f"target 3, keys: {KEYS_REQUESTS} requests with no, a wrong or a revoked key")
    rows = []
    for run in range(runs):
        rows.append(keys_run(lab, url, model, good, run + 1))
        log(f"  run {run + 1}: {rows[-1]}")
    return {
        "requests_per_run": KEYS_REQUESTS,
        "mix": "round robin: no Authorization, a wrong key, a key made and revoked just before",
        "witness": "the router's vllm_router_cb_outcomes_total summed over workers "
        "(127.0.0.1:29080/metrics on node1), before and after",
        "runs": rows,
        "refused_401_median": statistics.median(r["refused_401"] for r in rows),
        "reached_engine_median": statistics.median(r["reached_engine"] for r in rows),
        "reached_engine_total": sum(r["reached_engine"] for r in rows),
    }


# -- target 4: two deployments ----------------------------------------------------------------
def proven(deployed: dict[str, Any]) -> list[str | None]:
    return [r["proven"] if not r["problems"] else None for r in deployed["replicas"]]


def two_deployments(
    lab: Lab, url: str, key: str, first: dict[str, Any], second: dict[str, Any], runs: int
) -> dict[str, Any]:
    log(f"target 4, two deployments: {first['name']} and {second['name']}")
    rows = []
    for run in range(runs):
        status = lab.view("status")
        states = {d["name"]: d["state"] for d in status["deployments"]}
        answers = {d["name"]: ask(url, key, d["name"], 8, run).status for d in (first, second)}
        rows.append({"states": states, "answers": answers})
        log(f"  run {run + 1}: {rows[-1]}")
    both = {
        d["name"]: {
            "engine": d["engine"],
            "layout": d["layout"],
            "replicas": [r["nodes"] for r in d["replicas"]],
            "proven": proven(d),
            "run_took_s": d["took_s"],
        }
        for d in (first, second)
    }
    every = all(p is not None for d in both.values() for p in d["proven"])
    serving = all(set(r["states"].values()) == {"serving"} and len(r["states"]) == 2 for r in rows)
    answered = all(set(r["answers"].values()) == {200} for r in rows)
    return {
        "deployments": both,
        "runs": rows,
        "every_replica_proven": every,
        "both_serving_every_run": serving,
        "both_answered_200_every_run": answered,
    }


# -- the result --------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    others = [
        n
        for n in sh(["ip", "netns", "list"], check=False).stdout.split()
        if n.startswith("halo-") and not n.startswith(f"halo-{LAB_NAME}-")
    ]
    return {
        "cpus": os.cpu_count(),
        "system": platform.platform(),
        "python": platform.python_version(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "other_lab_nodes_running": others,
    }


def commit() -> dict[str, Any]:
    head = sh(["git", "-C", str(REPO), "rev-parse", "HEAD"], check=False).stdout.strip()
    changed = sh(["git", "-C", str(REPO), "status", "--porcelain", "--", "src"], check=False)
    return {
        "commit": head,
        "src_uncommitted": changed.stdout.split("\n")[:40] if changed.stdout else [],
    }


def targets(result: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for engine, cost in result.get("gateway_cost", {}).items():
        for level, found in cost["levels"].items():
            out[f"gateway_cost_{engine}_{level}"] = {
                "ttft_p50_added_ms": found["delta_of_medians"]["ttft_p50_added_ms"],
                "itl_p50_ratio": found["delta_of_medians"]["itl_p50_ratio"],
                "output_tok_s_ratio": found["delta_of_medians"]["output_tok_s_ratio"],
                "checks": found["checks"],
                "met": found["met"],
            }
    if "failover" in result:
        f = result["failover"]
        back = f["serving_again_s_median"]
        out["failover_failed_requests"] = {
            "median": f["failed_median"],
            "max": f["failed_max"],
            "target": f"<= {TARGETS['failed_requests']} (goal 0)",
            "met": f["failed_median"] <= TARGETS["failed_requests"],
        }
        out["failover_serving_again_s"] = {
            "median": back,
            "target": "<= 60",
            "met": back is not None and back <= TARGETS["serving_again_s"],
        }
    if "keys" in result:
        k = result["keys"]
        out["keys_reached_engine"] = {
            "total": k["reached_engine_total"],
            "refused_401_median": k["refused_401_median"],
            "met": k["reached_engine_total"] == 0
            and all(r["refused_401"] == r["requests"] for r in k["runs"]),
        }
    if "two_deployments" in result:
        t = result["two_deployments"]
        out["two_deployments"] = {
            "met": t["every_replica_proven"]
            and t["both_serving_every_run"]
            and t["both_answered_200_every_run"]
        }
    return out


def save(path: Path, result: dict[str, Any]) -> None:
    result["targets"] = targets(result)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


# -- the phases ----------------------------------------------------------------------------------
def models(lab: Lab) -> dict[str, Path]:
    made = {"gguf": lab.dir / "model" / "model.gguf"}
    sh([HALO, "lab", "model", str(lab.root / "gguf"), "--format", "gguf"])
    made["gguf"].parent.mkdir(parents=True)
    made["gguf"].write_bytes((lab.root / "gguf" / "model.gguf").read_bytes())
    if lab.vllm:
        made["hf"] = lab.dir / "hf"
        sh([HALO, "lab", "model", str(made["hf"])])
    return made


def phases(lab: Lab, runs: int, out: Path, result: dict[str, Any]) -> None:
    lab.up()
    made = models(lab)
    result["lab"] = {
        "nodes": 3,
        "mode": "installed",
        "cluster": lab.cluster,
        "gateway": "router and key gate on node1 (key gate on its management address)",
        "llama_cpp_threads": 1,
    }
    solo = lab.deploy(made["gguf"], "solo", "node1", 1, LLAMA["layout"])
    gateway = lab.json_of("gateway", "start")
    url = gateway["url"]
    good = lab.key("bench")
    result["lab"]["llama_server_argv"] = lab.engine_argv("node1", "llama-server")
    result["gateway_cost"] = {
        "llama.cpp": gateway_cost(lab, "llama.cpp", "node3", solo, url, good, LLAMA, runs)
    }
    save(out, result)
    result["gateway_cost_by_hop"] = {
        "llama.cpp": decomposition(lab, solo, url, good[1], LLAMA, runs)
    }
    save(out, result)
    result["keys"] = keys(lab, url, "solo", good[0], runs)
    save(out, result)
    lab.halo("stop", "solo")
    pair = lab.deploy(made["gguf"], "pair", "node1,node2", 2, LLAMA["layout"])
    result["failover"] = failover(lab, url, good[0], pair, runs)
    save(out, result)
    layout = VLLM["layout"] if lab.vllm else LLAMA["layout"]
    other = lab.deploy(made["hf" if lab.vllm else "gguf"], "other", "node3", 1, layout)
    until("the router holds all three replicas", lab.router_healthy, 120)
    result["two_deployments"] = two_deployments(lab, url, good[0], pair, other, runs)
    save(out, result)
    if lab.vllm:
        lab.halo("stop", "pair")  # vLLM gets the machine as llama.cpp had it
        result["lab"]["vllm_argv"] = lab.engine_argv("node3", "vllm serve")
        result["gateway_cost"]["vllm"] = gateway_cost(
            lab, "vllm", "node2", other, url, good, VLLM, runs
        )
        save(out, result)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="runs of each target (default 3)")
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "results" / "gateway.json",
        help="the result file (default benchmarks/results/gateway.json)",
    )
    parser.add_argument("--no-vllm", action="store_true", help="llama.cpp only")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the lab needs root")
    engine = os.environ.get("HALO_ENGINE") or str(REPO / ".venv-engine")
    vllm = not args.no_vllm and Path(engine, "bin", "vllm").exists()
    signal.signal(signal.SIGTERM, stopped_by_signal)
    result: dict[str, Any] = {
        "benchmark": "gateway",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **commit(),
        "machine": machine(),
        "runs": args.runs,
        "targets_asked": TARGETS,
        "incomplete": True,
    }
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        lab = Lab(Path(tmp), vllm)
        try:
            phases(lab, args.runs, args.out, result)
            result.pop("incomplete")
        finally:
            log("tearing down: halo stop, halo gateway stop, halo lab down")
            result["left_before_lab_down"] = lab.down()
            result["machine"]["loadavg_1m_end"] = round(os.getloadavg()[0], 2)
            save(args.out, result)
    print(json.dumps(result["targets"], indent=2))
    log(f"written: {args.out}")


if __name__ == "__main__":
    main()
