"""`halo bench serve` against `vllm bench serve` on the same vLLM server and the same workload.

Target (issue 29, restating the first one's): per case, over the same rounds,
- TTFT: halo's is no farther from the server's own than `vllm bench serve`'s is. Each run's
  distance is |the tool's mean TTFT - the server's own mean TTFT over that run| (the
  server's Prometheus histogram, read before and after the run, see below); per case the
  median over the rounds of each tool's distance is taken, and halo's must be <= vLLM's.
  Whatever a client spends of its own between "request sent" and "first token seen" counts
  against it. (The old target, TTFT p50 within 10 % of vLLM's, is kept in the result as
  `within_10pct` for reference: on this machine halo's is 10-20 % shorter.)
- ITL p50 and output tokens/s: the median over the rounds within 10 % of vLLM's.
- The server's window held exactly the run's requests: halo runs with `--warmup 0`, as
  `vllm bench serve` runs by default (no warm-up, no initial test request).
`met` is all of these in every case.

The script builds the lab's tiny model (`halo lab model`), starts `vllm serve` on it (CPU,
TP=1, 127.0.0.1:8124) from the engine environment, runs both tools round by round (which
one goes first alternates; every invocation gets its own seed, so no run finds another's
prompts in the prefix cache), compares medians, and stops the server's whole process group
at the end (no vLLM process and none of its /dev/shm segments left). Writes
benchmarks/results/serve_vs_vllm.json.

    .venv/bin/python benchmarks/bench_serve_vs_vllm.py [--engine DIR] [--rounds 12]

The engine environment (vLLM CPU) is --engine, else $HALO_ENGINE_ENV, else .venv-engine in
the repository.

CPU placement matters on a small machine. vLLM's engine core and its worker wait for each
other on a shared-memory queue by spinning (sched_yield, for a second after every read). Left
where the scheduler puts it, the spinning engine core shares a core with the API server and
starves it: the server then sends many responses in one burst after their last token (TTFT ~
end-to-end, ITL a few µs, for either client) and throughput halves. So the API server and
both clients run on CPU 0, and the engine core and its worker on the other CPUs
(`VLLM_CPU_OMP_THREADS_BIND`, then the engine core's threads are moved there once it is up).
The placement is stored in the result, with a count of the runs in which the server streamed.

A third witness: the server's own Prometheus histograms (`vllm:time_to_first_token_seconds`,
`vllm:inter_token_latency_seconds`), read before and after every run. Their mean over the
run is what the engine measured itself, from a request's arrival to its first token, with no
client in it; each tool's mean is set beside it (`server_mean`), so that a difference between
the tools can be put on the client that adds it. `requests` is the count the server saw in
the window; it must equal the run's prompts.

First, both tools run against a steady stand-in (tests/bench/fake_openai.py: a token every
2 ms, every third one with empty text, usage at the end, and the same two histograms' sum
and count from its own clock), where only the definitions and the clients' own overhead can
differ (`stand_in` in the result, with its own `met`).
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HALO = str(Path(sys.executable).parent / "halo")
HOST, PORT = "127.0.0.1", 8124
STAND_IN_PORT, STAND_IN_TOKEN_MS = 8125, 2.0
# A short idle pause before every run, so that no run starts in the tail of the one before.
SETTLE_S = 2.0
FRONT_CPU = "0"  # the API server and both clients
ENGINE_CPUS = f"1-{(os.cpu_count() or 2) - 1}"  # the engine core and its worker
OUTPUT_LEN = 64
CASES = [(64, 1), (64, 4), (128, 1), (128, 4)]  # (input_len, concurrency)
PROMPTS_PER_SLOT = 16  # prompts = 16 x concurrency: every run lasts about as long
METRICS = ("output_tok_s", "ttft_p50_ms", "itl_p50_ms")
STREAMED_ITL_MS = 0.1  # below: the server sent the response in one burst (see streamed())
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def server_argv(engine: Path, model: Path) -> list[str]:
    return [
        str(engine / "bin" / "vllm"),
        "serve",
        str(model),
        "--host",
        HOST,
        "--port",
        str(PORT),
        "--tensor-parallel-size",
        "1",
        "--enforce-eager",
        "--max-model-len",
        "1024",
        "--max-num-seqs",
        "8",
    ]


def group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            state, _ppid, group = stat.rsplit(")", 1)[1].split()[:3]
            if int(group) == pgid and state != "Z":  # a zombie is gone, only not yet reaped
                pids.append(int(entry.name))
    return pids


def shm_of(pids: list[int]) -> set[str]:
    """The /dev/shm files these processes have mapped or open."""
    found: set[str] = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue
        paths = [line.split(maxsplit=5)[-1] for line in maps.splitlines() if "/dev/shm/" in line]
        found.update(
            p.split(" (deleted)")[0] for p in [*paths, *links] if p.startswith("/dev/shm/")
        )
    return found


@contextmanager
def vllm_server(engine: Path, model: Path, log: Path) -> Iterator[dict[str, Any]]:
    """`vllm serve` in its own process group; on exit the group is stopped (TERM, then KILL)
    and any /dev/shm segment it held is checked for (and removed when left)."""
    pinned = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": ENGINE_CPUS}
    env = {**os.environ, **OFFLINE, **pinned}
    argv = ["taskset", "-c", FRONT_CPU, *server_argv(engine, model)]
    with log.open("w") as out:
        proc = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    report: dict[str, Any] = {"argv": shown_argv(argv, engine, model), "env": {**OFFLINE, **pinned}}
    shm: set[str] = set()
    try:
        wait_ready(proc, log)
        report["cpus"] = place_engine(group_pids(proc.pid))
        shm = shm_of(group_pids(proc.pid))
        yield report
    finally:
        shm |= shm_of(group_pids(proc.pid))
        os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while group_pids(proc.pid) and time.monotonic() < deadline:
            proc.poll()
            time.sleep(0.2)
        if group_pids(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(1)
        proc.wait()
        left = [p for p in sorted(shm) if os.path.exists(p)]
        for path in left:
            os.unlink(path)
        report["after_stop"] = {"processes_left": group_pids(proc.pid), "shm_removed": left}


def shown_argv(argv: list[str], engine: Path, model: Path) -> list[str]:
    """The server's argv as the result keeps it: no path of this machine (the engine relative
    to the repository when it is there, the temporary model as MODEL)."""
    where = str(engine)
    try:
        where = str(engine.relative_to(REPO))
    except ValueError:
        where = "ENGINE"
    return ["MODEL" if a == str(model) else a.replace(str(engine), where, 1) for a in argv]


def place_engine(pids: list[int]) -> dict[str, str]:
    """Move the engine core (every thread) onto ENGINE_CPUS; return each process's CPUs."""
    placed: dict[str, str] = {}
    for pid in pids:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        if comm.startswith("VLLM::EngineCor"):
            subprocess.run(
                ["taskset", "-a", "-p", "-c", ENGINE_CPUS, str(pid)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        status = Path(f"/proc/{pid}/status").read_text()
        cpus = next(x.split()[1] for x in status.splitlines() if x.startswith("Cpus_allowed_list"))
        placed[f"{comm} ({pid})"] = cpus
    return placed


def wait_ready(proc: subprocess.Popen[bytes], log: Path, limit_s: float = 600) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"vllm serve exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"http://{HOST}:{PORT}/v1/models", timeout=2).close()
            return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"vllm serve not ready within {limit_s:g} s")


SERVER_SERIES = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
}


def server_histograms(url: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of each SERVER_SERIES histogram, summed over its label sets."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    found = {key: [0.0, 0.0] for key in SERVER_SERIES}
    for line in text.splitlines():
        for key, name in SERVER_SERIES.items():
            for slot, suffix in enumerate(("_sum", "_count")):
                if line.startswith(name + suffix + "{") or line.startswith(name + suffix + " "):
                    found[key][slot] += float(line.rsplit(" ", 1)[1])
    return {key: (total, count) for key, (total, count) in found.items()}


def server_means(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, float | None]:
    """The server's own mean TTFT and ITL (ms) over the requests between two readings."""
    means: dict[str, float | None] = {}
    for key in SERVER_SERIES:
        total = after[key][0] - before[key][0]
        count = after[key][1] - before[key][1]
        means[f"{key}_mean_ms"] = round(1e3 * total / count, 3) if count else None
    means["requests"] = after["ttft"][1] - before["ttft"][1]
    return means


def run_halo(
    url: str, model: Path, input_len: int, concurrency: int, prompts: int, seed: int
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [
                "taskset",
                "-c",
                FRONT_CPU,
                HALO,
                "bench",
                "serve",
                "--url",
                url,
                "--model",
                str(model),
                "--concurrency",
                str(concurrency),
                "--prompts",
                str(prompts),
                "--input-len",
                str(input_len),
                "--output-len",
                str(OUTPUT_LEN),
                "--seed",
                str(seed),
                "--warmup",
                "0",  # as vllm bench serve: the server's window holds only the timed requests
                "--out",
                f"{tmp}/serve.json",
                "--json",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    data = json.loads(done.stdout)
    level = data["levels"][0]
    assert level["errors"] == 0 and data["tokens_from"] == "usage", level["first_error"]
    return {
        "output_tok_s": level["output_tokens_per_s"],
        "ttft_p50_ms": level["ttft_ms"]["p50"],
        "itl_p50_ms": level["itl_ms"]["p50"],
        "tpot_p50_ms": level["tpot_ms"]["p50"],
        "ttft_mean_ms": level["ttft_ms"]["mean"],
        "itl_mean_ms": level["itl_ms"]["mean"],
        "e2e_p50_ms": level["e2e_ms"]["p50"],
        "output_tokens": level["output_tokens"],
        "output_chunks": level["output_chunks"],
        "input_tokens": level["input_tokens"],
        "duration_s": level["wall_s"],
    }


def run_vllm(
    url: str, engine: Path, model: Path, input_len: int, concurrency: int, prompts: int, seed: int
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                "taskset",
                "-c",
                FRONT_CPU,
                str(engine / "bin" / "vllm"),
                "bench",
                "serve",
                "--backend",
                "vllm",
                "--base-url",
                url,
                "--model",
                str(model),
                "--dataset-name",
                "random",
                "--random-input-len",
                str(input_len),
                "--random-output-len",
                str(OUTPUT_LEN),
                "--num-prompts",
                str(prompts),
                "--max-concurrency",
                str(concurrency),
                "--ignore-eos",
                "--temperature",
                "0",  # halo asks for greedy decoding too
                "--seed",
                str(seed),
                "--disable-tqdm",
                "--save-result",
                "--result-dir",
                tmp,
                "--result-filename",
                "vllm.json",
            ],
            env={**os.environ, **OFFLINE},
            capture_output=True,
            text=True,
            check=True,
        )
        data = json.loads((Path(tmp) / "vllm.json").read_text())
    assert data["failed"] == 0 and data["completed"] == prompts
    return {
        "output_tok_s": round(data["output_throughput"], 3),
        "ttft_p50_ms": round(data["median_ttft_ms"], 3),
        "itl_p50_ms": round(data["median_itl_ms"], 3),
        "tpot_p50_ms": round(data["median_tpot_ms"], 3),
        "ttft_mean_ms": round(data["mean_ttft_ms"], 3),
        "itl_mean_ms": round(data["mean_itl_ms"], 3),
        "output_tokens": data["total_output_tokens"],
        "input_tokens": data["total_input_tokens"],
        "duration_s": round(data["duration"], 3),
    }


def ratios(halo: dict[str, Any], vllm: dict[str, Any]) -> dict[str, float]:
    return {m: round(halo[m] / vllm[m], 3) for m in (*METRICS, "tpot_p50_ms")}


def one_round(
    url: str,
    engine: Path,
    model: Path,
    input_len: int,
    concurrency: int,
    r: int,
    seed: int,
    settle_s: float,
    witness: bool = False,
) -> dict[str, Any]:
    """Both tools on one case, the first one alternating by round and case; the server idles
    ``settle_s`` before each (see SETTLE_S). ``witness``: read the server's own histograms
    around each run."""
    prompts = PROMPTS_PER_SLOT * concurrency
    first = "halo" if (r + CASES.index((input_len, concurrency))) % 2 == 0 else "vllm"
    got: dict[str, dict[str, Any]] = {}
    for tool in (first, "vllm" if first == "halo" else "halo"):
        time.sleep(settle_s)
        before = server_histograms(url) if witness else None
        if tool == "halo":
            got[tool] = run_halo(url, model, input_len, concurrency, prompts, seed)
        else:
            got[tool] = run_vllm(url, engine, model, input_len, concurrency, prompts, seed + 1)
        if before is not None:
            got[tool]["server_mean"] = server_means(before, server_histograms(url))
        shown = ", ".join(f"{m} {got[tool][m]}" for m in (*METRICS, "tpot_p50_ms"))
        print(f"  in {input_len} c{concurrency} round {r} {tool}: {shown}", flush=True)
    return {
        "round": r,
        "first": first,
        **got,
        "ratio": ratios(got["halo"], got["vllm"]),
        "ttft_from_server_ms": {tool: from_server(got[tool], prompts) for tool in got},
    }


def all_rounds(
    url: str,
    engine: Path,
    model: Path,
    rounds: int,
    seeds: int,
    settle_s: float = 0.0,
    witness: bool = False,
) -> list[dict[str, Any]]:
    """Rounds outside, cases inside: a noisy minute hits every case, not one."""
    runs: dict[tuple[int, int], list[dict[str, Any]]] = {c: [] for c in CASES}
    for r in range(rounds):
        for index, (input_len, concurrency) in enumerate(CASES):
            seed = seeds + 10_000 * (index + 1) + 2 * r  # +1 for vllm: no prompt seen twice
            runs[(input_len, concurrency)].append(
                one_round(url, engine, model, input_len, concurrency, r, seed, settle_s, witness)
            )
    return [summary(i, c, runs[(i, c)]) for i, c in CASES]


@contextmanager
def stand_in_server(model: Path) -> Iterator[str]:
    """tests/bench/fake_openai.py in its own process: vLLM's stream shape (a token every
    STAND_IN_TOKEN_MS, every third one with empty text, usage at the end) at a steady pace,
    so that both tools' definitions meet without vLLM CPU's noise."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from http.server import ThreadingHTTPServer\n"
        "from tests.bench.fake_openai import FakeOpenAI\n"
        "fake = FakeOpenAI(sys.argv[2], float(sys.argv[3]))\n"
        "server = ThreadingHTTPServer(('127.0.0.1', int(sys.argv[4])), fake.handler())\n"
        "server.daemon_threads = True\n"
        "server.serve_forever()\n"
    )
    argv = [sys.executable, "-c", code, str(REPO), str(model), str(STAND_IN_TOKEN_MS / 1e3)]
    proc = subprocess.Popen(  # its stderr: only clients that closed idle connections
        [*argv, str(STAND_IN_PORT)], start_new_session=True, stderr=subprocess.DEVNULL
    )
    url = f"http://{HOST}:{STAND_IN_PORT}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{url}/v1/models", timeout=2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()


def streamed(run: dict[str, Any]) -> bool:
    """Did the server stream this run's tokens? On a loaded 2-core VM vLLM CPU often sends a
    whole response in one burst after its last token (the kernel's receive timestamps show
    it; both tools see it): then ITL p50 is a few µs and TTFT is the whole request."""
    return bool(run["itl_p50_ms"] >= STREAMED_ITL_MS)


def from_server(run: dict[str, Any], prompts: int) -> float | None:
    """|the tool's mean TTFT - the server's own mean TTFT| over one run (ms); None without
    the server's reading, or when its window did not hold exactly the run's requests."""
    own = run.get("server_mean")
    if not own or own["ttft_mean_ms"] is None or own["requests"] != prompts:
        return None
    return round(abs(float(run["ttft_mean_ms"]) - float(own["ttft_mean_ms"])), 3)


def target(
    halo: list[dict[str, Any]], vllm: list[dict[str, Any]], prompts: int
) -> dict[str, Any] | None:
    """The target on these runs of one case (see the module's docstring): the median over
    the runs of each tool's TTFT distance from the server, halo's no farther; ITL p50 and
    output tokens/s medians within 10 %. None when a tool has no run."""
    halo_median, vllm_median = medians(halo), medians(vllm)
    if halo_median is None or vllm_median is None:
        return None
    ratio = ratios(halo_median, vllm_median)
    seen = {
        tool: [from_server(x, prompts) for x in runs]
        for tool, runs in (("halo", halo), ("vllm", vllm))
    }
    known = {tool: [d for d in found if d is not None] for tool, found in seen.items()}
    exact = all(len(known[tool]) == len(seen[tool]) for tool in seen)
    distance = {
        tool: round(statistics.median(found), 3) if found else None for tool, found in known.items()
    }
    halo_d, vllm_d = distance["halo"], distance["vllm"]
    checks = {
        "server_saw_only_the_runs": exact,
        "ttft_no_farther_from_server": (
            exact and halo_d is not None and vllm_d is not None and halo_d <= vllm_d
        ),
        "itl_p50_within_10pct": abs(ratio["itl_p50_ms"] - 1) <= 0.10,
        "output_tok_s_within_10pct": abs(ratio["output_tok_s"] - 1) <= 0.10,
    }
    return {
        "ttft_from_server_ms": distance,
        "ratio": {m: ratio[m] for m in ("itl_p50_ms", "output_tok_s")},
        "checks": checks,
        "met": all(checks.values()),
    }


def medians(runs: list[dict[str, Any]]) -> dict[str, float] | None:
    if not runs:
        return None
    return {m: round(statistics.median(x[m] for x in runs), 3) for m in (*METRICS, "tpot_p50_ms")}


def over_server(per_round: list[dict[str, Any]]) -> dict[str, dict[str, float | None]] | None:
    """Median over the rounds of (tool's mean - server's own mean), for TTFT and ITL: the
    time each client adds to what the engine measured."""
    if not all("server_mean" in x[tool] for x in per_round for tool in ("halo", "vllm")):
        return None
    added: dict[str, dict[str, float | None]] = {}
    for tool in ("halo", "vllm"):
        added[tool] = {}
        for key in ("ttft", "itl"):
            gaps = [
                x[tool][f"{key}_mean_ms"] - x[tool]["server_mean"][f"{key}_mean_ms"]
                for x in per_round
                if x[tool]["server_mean"][f"{key}_mean_ms"] is not None
            ]
            added[tool][key] = round(statistics.median(gaps), 3) if gaps else None
    return added


def summary(input_len: int, concurrency: int, per_round: list[dict[str, Any]]) -> dict[str, Any]:
    median = {tool: medians([x[tool] for x in per_round]) for tool in ("halo", "vllm")}
    ratio = ratios(median["halo"], median["vllm"])  # type: ignore[arg-type]
    kept = {tool: [x[tool] for x in per_round if streamed(x[tool])] for tool in ("halo", "vllm")}
    both = {tool: medians(runs) for tool, runs in kept.items()}
    in_mode = ratios(both["halo"], both["vllm"]) if both["halo"] and both["vllm"] else None
    prompts = PROMPTS_PER_SLOT * concurrency
    return {
        "input_len": input_len,
        "output_len": OUTPUT_LEN,
        "concurrency": concurrency,
        "prompts": prompts,
        "rounds": per_round,
        "target": target([x["halo"] for x in per_round], [x["vllm"] for x in per_round], prompts),
        "target_streamed": target(kept["halo"], kept["vllm"], prompts),
        "median": {**median, "ratio": ratio},
        "median_of_round_ratios": {
            m: round(statistics.median(x["ratio"][m] for x in per_round), 3) for m in METRICS
        },
        # the first target, for reference: TTFT p50 too within 10 % of vLLM's
        "within_10pct": {m: abs(ratio[m] - 1) <= 0.10 for m in METRICS},
        # vllm's TTFT also holds its aiohttp client's own time before the request leaves
        # (about 0.75 ms more than halo's on this VM): a constant, not a ratio.
        "ttft_p50_vllm_minus_halo_ms": round(
            median["vllm"]["ttft_p50_ms"] - median["halo"]["ttft_p50_ms"],  # type: ignore[index]
            3,
        ),
        "client_minus_server_mean_ms": over_server(per_round),
        "streamed_runs": {tool: len(runs) for tool, runs in kept.items()},
        "median_streamed": {**both, "ratio": in_mode},
        "within_10pct_streamed": (
            {m: abs(in_mode[m] - 1) <= 0.10 for m in METRICS} if in_mode else None
        ),
    }


def met(cases: list[dict[str, Any]], key: str = "target") -> bool:
    return bool(cases) and all(c[key] is not None and c[key]["met"] for c in cases)


def versions(engine: Path) -> dict[str, str]:
    probe = (
        "import vllm, torch, transformers\n"
        "print(vllm.__version__, torch.__version__, transformers.__version__)"
    )
    out = subprocess.run(
        [str(engine / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    halo = subprocess.run([HALO, "--version"], capture_output=True, text=True, check=True).stdout
    return {
        "halo": halo.split()[-1],
        "vllm": out[0],
        "torch": out[1],
        "transformers": out[2],
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--engine",
        default=os.environ.get("HALO_ENGINE_ENV") or str(REPO / ".venv-engine"),
        help="the engine environment (vLLM CPU)",
    )
    # 12: with 8, two runs on the loaded 2-core VM had ITL p50 medians 15-25 % off in three
    # cases, from rounds where the server bundled tokens into fewer events (docs/bench.md)
    parser.add_argument("--rounds", type=int, default=12, help="rounds on vllm serve")
    parser.add_argument("--stand-in-rounds", type=int, default=3)
    args = parser.parse_args()
    engine = Path(args.engine)
    if not (engine / "bin" / "vllm").exists():
        raise SystemExit(f"no vllm in {engine}: pass --engine or set HALO_ENGINE_ENV")
    load = round(os.getloadavg()[0], 2)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        subprocess.run([HALO, "lab", "model", str(model)], check=True, stdout=subprocess.DEVNULL)
        with stand_in_server(model) as url:
            print(f"stand-in server (steady {STAND_IN_TOKEN_MS} ms a token)", flush=True)
            stand_in = all_rounds(url, engine, model, args.stand_in_rounds, 50_000, witness=True)
        with vllm_server(engine, model, Path(tmp) / "server.log") as server:
            print("vllm serve", flush=True)
            url = f"http://{HOST}:{PORT}"
            cases = all_rounds(url, engine, model, args.rounds, 0, SETTLE_S, witness=True)
    out = {
        "benchmark": "serve_vs_vllm",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "system": platform.platform(),
            "loadavg_1m_start_end": [load, round(os.getloadavg()[0], 2)],
        },
        "versions": versions(engine),
        "model": "halo lab model (tiny random Llama, 4.5 M parameters, BPE vocabulary 4096)",
        "server": server,
        "workload": {
            "dataset": "random: vllm --dataset-name random; halo random words fitted by /tokenize",
            "output_len": OUTPUT_LEN,
            "ignore_eos": True,
            "temperature": 0.0,
            "order": "rounds of every case; the first tool alternates; each run its own seed",
            "settle_s_before_each_run": SETTLE_S,
            "client_cpus": FRONT_CPU,
        },
        "cases": cases,
        "stand_in": {
            "server": "tests/bench/fake_openai.py",
            "token_ms": STAND_IN_TOKEN_MS,
            "cases": stand_in,
            "met": met(stand_in),
        },
        "met": met(cases),
        "met_streamed": met(cases, "target_streamed"),
        "met_first_target": all(all(c["within_10pct"].values()) for c in cases),
    }
    (HERE / "results" / "serve_vs_vllm.json").write_text(json.dumps(out, indent=2) + "\n")
    for where, found in (("stand-in ", stand_in), ("", cases)):
        for c in found:
            name = f"{where}in{c['input_len']}/c{c['concurrency']}"
            print(f"{name} ratios (all runs): {c['median']['ratio']}")
            print(f"{name} streamed runs {c['streamed_runs']}")
            print(f"{name} target: {c['target']}")
    print(f"stand-in met: {out['stand_in']['met']}")  # type: ignore[index]
    print(f"met: {out['met']}; met on streamed runs: {out['met_streamed']}")


if __name__ == "__main__":
    main()
