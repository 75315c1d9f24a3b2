"""`halo bench serve` against `llama-server` beside `llama-bench`'s tg rate: same build, same
model, one node.

llama-bench measures llama.cpp's decode rate with no server in the way (`-p 0 -n N`: N tokens
generated at batch 1, its "tg" test). halo bench serve measures what a client of llama-server
sees: its decode rate is 1000 / TPOT p50 (time per output token after the first), and its
output tok/s also holds the prompt and the HTTP path. llama-server's own `timings` of one
non-streamed request are the third witness. Rounds alternate which tool goes first.

Two models, both `halo lab model --format gguf` (F16): the tiny default (4 blocks, hidden
256), where a token takes a fraction of a millisecond and every per-token overhead of the
server and of HTTP streaming shows, and a larger one (8 blocks, hidden 1024, 83 M
parameters) where a token takes tens of milliseconds, as on a real model. llama.cpp runs
with one thread on CPU 1; the client on CPU 0.

Also: `halo plan --gguf MODEL --engine llama.cpp --calibrate RESULT` from one of the runs,
whose predicted single-node decode rate must come back to the measured one.

    .venv/bin/python benchmarks/bench_llama_vs_llamabench.py [--build DIR] [--rounds 5]

Writes benchmarks/results/llama_vs_llamabench.json; also records the build's time and size
(from its build.json and the directory) in benchmarks/results/llama_cpp.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HALO = str(Path(sys.executable).parent / "halo")
PORT = 8126
INPUT_LEN = 32
# name -> (halo lab model options, tokens generated per request, prompts per run)
MODELS = {
    "tiny-4.5M": ([], 128, 16),
    "83M": (["--layers", "8", "--hidden", "1024", "--heads", "16", "--kv-heads", "8"], 64, 6),
}
ENGINE_CPU, CLIENT_CPU = "1", "0"


def server(build: Path, model: Path, log: Path) -> subprocess.Popen[bytes]:
    argv = [
        "taskset", "-c", ENGINE_CPU, str(build / "bin" / "llama-server"), "--model", str(model),
        "--host", "127.0.0.1", "--port", str(PORT), "--threads", "1", "--parallel", "1",
        "--ctx-size", "2048", "--no-ui", "--n-gpu-layers", "0",
    ]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    for _ in range(300):
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited:\n{log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2).close()
            return proc
        except OSError:
            time.sleep(0.2)
    raise SystemExit("llama-server not ready in 60 s")


def run_llama_bench(build: Path, model: Path, gen: int) -> dict[str, float]:
    argv = [
        "taskset", "-c", ENGINE_CPU, str(build / "bin" / "llama-bench"), "-m", str(model),
        "-p", "0", "-n", str(gen), "-t", "1", "-r", "3", "-o", "json",
    ]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    row = json.loads(out)[0]
    return {"tg_tok_s": round(row["avg_ts"], 3), "tg_stddev": round(row["stddev_ts"], 3)}


def run_halo(model: Path, seed: int, out: Path, gen: int, prompts: int) -> dict[str, Any]:
    argv = [
        "taskset", "-c", CLIENT_CPU, HALO, "bench", "serve", "--url", f"http://127.0.0.1:{PORT}",
        "--model", str(model), "--concurrency", "1", "--prompts", str(prompts),
        "--input-len", str(INPUT_LEN), "--output-len", str(gen), "--seed", str(seed),
        "--out", str(out), "--json",
    ]  # fmt: skip
    data = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    level = data["levels"][0]
    assert level["errors"] == 0 and data["tokens_from"] == "usage", level["first_error"]
    return {
        "decode_tok_s": round(1e3 / level["tpot_ms"]["p50"], 3),
        "tpot_p50_ms": level["tpot_ms"]["p50"],
        "output_tok_s": level["output_tokens_per_s"],
        "ttft_p50_ms": level["ttft_ms"]["p50"],
    }


def server_timings(model: Path, gen: int) -> float:
    """llama-server's own decode rate of one greedy request (its ``timings``)."""
    body = json.dumps(
        {"model": str(model), "prompt": "The cluster has two nodes", "max_tokens": gen,
         "temperature": 0.0, "ignore_eos": True}
    ).encode()  # fmt: skip
    request = urllib.request.Request(
        f"http://127.0.0.1:{PORT}/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        data = json.loads(response.read())
    return round(float(data["timings"]["predicted_per_second"]), 3)


def plan_calibrated(model: Path, result: Path) -> float:
    argv = [
        HALO, "plan", "--gguf", str(model), "--engine", "llama.cpp", "--nodes", "1",
        "--context", "2048", "--calibrate", str(result), "--json",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return round(float(json.loads(done.stdout)["rows"][0]["tokens_per_s_batch1"]), 3)


def build_record(build: Path) -> dict[str, Any]:
    info = json.loads((build / "build.json").read_text())
    size = sum(p.stat().st_size for p in build.rglob("*") if p.is_file() and not p.is_symlink())
    return {
        "benchmark": "llama_cpp_build",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "system": platform.platform()},
        "build": info,
        "bytes": size,
        "command": "make llama-cpp (engine/llama_cpp/build.sh)",
    }


def one_model(
    build: Path, gguf: Path, tmp: Path, rounds_n: int, gen: int, prompts: int
) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    for r in range(rounds_n):
        got: dict[str, Any] = {"round": r}
        order = ("halo", "llama-bench") if r % 2 == 0 else ("llama-bench", "halo")
        got["first"] = order[0]
        for tool in order:
            if tool == "llama-bench":
                got["llama_bench"] = run_llama_bench(build, gguf, gen)
                continue
            proc = server(build, gguf, tmp / "server.log")
            try:
                out = tmp / f"serve-{gguf.parent.name}-{r}.json"
                got["halo"] = run_halo(gguf, 1000 + r, out, gen, prompts)
                got["server_timings_tok_s"] = server_timings(gguf, gen)
                if r == 0:
                    got["plan_calibrated_tok_s"] = plan_calibrated(gguf, out)
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
        got["ratio_decode_halo_over_tg"] = round(
            got["halo"]["decode_tok_s"] / got["llama_bench"]["tg_tok_s"], 3
        )
        rounds.append(got)
    median = {
        "halo_decode_tok_s": statistics.median(x["halo"]["decode_tok_s"] for x in rounds),
        "halo_output_tok_s": statistics.median(x["halo"]["output_tok_s"] for x in rounds),
        "llama_bench_tg_tok_s": statistics.median(x["llama_bench"]["tg_tok_s"] for x in rounds),
        "server_timings_tok_s": statistics.median(x["server_timings_tok_s"] for x in rounds),
    }
    median["ratio_decode_halo_over_tg"] = round(
        median["halo_decode_tok_s"] / median["llama_bench_tg_tok_s"], 3
    )
    median["ratio_server_over_tg"] = round(
        median["server_timings_tok_s"] / median["llama_bench_tg_tok_s"], 3
    )
    return {
        "gen_tokens": gen,
        "prompts": prompts,
        "rounds": rounds,
        "median": median,
        "plan_calibrated_tok_s": rounds[0].get("plan_calibrated_tok_s"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--build", default=os.environ.get("HALO_LLAMA_CPP") or str(REPO / ".llama-cpp")
    )
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    build = Path(args.build).resolve()
    if not (build / "bin" / "llama-bench").exists():
        raise SystemExit(f"no llama.cpp build at {build}: run 'make llama-cpp' or pass --build")
    models: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (options, gen, prompts) in MODELS.items():
            model = Path(tmp) / name
            subprocess.run(
                [HALO, "lab", "model", str(model), "--format", "gguf", *options],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            models[name] = one_model(
                build, model / "model.gguf", Path(tmp), args.rounds, gen, prompts
            )
            models[name]["lab_model_options"] = options
            print(name, json.dumps(models[name]["median"]), flush=True)
    result = {
        "benchmark": "llama_vs_llamabench",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "system": platform.platform()},
        "build": json.loads((build / "build.json").read_text())["source"],
        "workload": {
            "input_len": INPUT_LEN,
            "concurrency": 1,
            "threads": 1,
            "engine_cpu": ENGINE_CPU,
            "client_cpu": CLIENT_CPU,
            "llama_bench": "-p 0 -n GEN -t 1 -r 3 (tg: GEN tokens at batch 1)",
            "halo_decode": "1000 / TPOT p50 (ms per output token after the first)",
        },
        "models": models,
    }
    (HERE / "results" / "llama_vs_llamabench.json").write_text(json.dumps(result, indent=2) + "\n")
    (HERE / "results" / "llama_cpp.json").write_text(
        json.dumps(build_record(build), indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
