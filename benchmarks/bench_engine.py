"""The real engine's budget (issue: the real engine in the lab), measured on this machine:

- engine install: `engine/build-env.sh` from nothing into a fresh cache, with a warm pip cache
  (target <= 3 min), and again when everything is there (the reuse path);
- serve ready: `halo serve` of the tiny model at TP=2 across two lab nodes (Ray executor),
  side by side with the same `vllm serve` started by hand on the head (the peer: what a user
  types without halo), rounds alternating which goes first; halo's ready time (target
  <= 90 s) and its whole run (preflight, warm-up and proof included) against the bare start;
- the whole `halo demo` (target <= 4 min on 2 cores).

Needs root and the engine environment (make engine). Writes benchmarks/results/engine.json.

    sudo .venv/bin/python benchmarks/bench_engine.py [--rounds 3] [--skip-install] [--skip-demo]
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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HALO = str(Path(sys.executable).parent / "halo")


def timed(argv: list[str], **kw: Any) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)
    return time.perf_counter() - start, done


def install() -> dict[str, Any]:
    """A fresh build into an empty cache (pip's own cache is warm), then the reuse path."""
    with tempfile.TemporaryDirectory(dir=Path.home()) as cache:
        env = {**os.environ, "HALO_CACHE": cache}
        link = REPO / ".venv-engine"
        before = os.readlink(link) if link.is_symlink() else None
        try:
            fresh, first = timed(["bash", str(REPO / "engine/build-env.sh")], env=env)
            again, second = timed(["bash", str(REPO / "engine/build-env.sh")], env=env)
        finally:
            if before is not None:  # leave the checkout's link as it was
                link.unlink(missing_ok=True)
                link.symlink_to(before)
        size = subprocess.run(["du", "-sb", cache], capture_output=True, text=True).stdout
    assert first.returncode == 0, first.stderr[-2000:]
    return {
        "fresh_s": round(fresh, 1),
        "reuse_s": round(again, 1),
        "bytes": int(size.split()[0]),
        "target_s": 180,
        "met": fresh <= 180,
        "reuse_line": second.stdout.strip().splitlines()[-1],
    }


def bare_serve(lab: Path, state: dict[str, Any], model: str, port: int) -> float:
    """`vllm serve` by hand on the head, as the docs tell a user: the head's plan in the
    environment, Ray executor; seconds until /health answers."""
    plan = state["nodes"]["node1"]["plan"]["env"]
    config = (lab / "halo.toml").read_text()
    vllm = config.split('[serve]\ncommand = "', 1)[1].split('"', 1)[0]
    # the cluster runs Ray with token authentication (halo up): a user's driver needs it too
    token = next((lab / ".halo").glob("*.ray-token")).read_text().strip()
    env = {**plan, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    script = (
        f"{exports}export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1\n"
        f"cd; setsid {vllm} serve {model} --tensor-parallel-size 2 "
        f"--distributed-executor-backend ray --host 127.0.0.1 --port {port} "
        "--max-model-len 1024 --max-num-seqs 8 --enforce-eager > bare.log 2>&1 < /dev/null &\n"
        "echo $! > bare.pid\n"
    )
    ssh = ["ssh", "-F", str(lab / "ssh_config"), "node1", "--"]
    start = time.perf_counter()
    subprocess.run([*ssh, "bash", "-s"], input=script, text=True, check=True)
    probe = f"curl -sf -m 2 http://127.0.0.1:{port}/health"
    while subprocess.run([*ssh, probe], capture_output=True).returncode != 0:
        alive = subprocess.run([*ssh, 'cd; kill -0 "$(cat bare.pid)"'], capture_output=True)
        if alive.returncode != 0 or time.perf_counter() - start > 600:
            log = subprocess.run([*ssh, "cd; tail -5 bare.log"], capture_output=True, text=True)
            raise SystemExit(f"the bare server never became healthy: {log.stdout}")
        time.sleep(0.5)
    ready = time.perf_counter() - start
    # as halo stop does: TERM to the group, KILL after 5 s (under Ray, vLLM can block on TERM)
    stop = (
        'cd; p=$(cat bare.pid); kill -TERM -- "-$p"; '
        'for i in $(seq 25); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done; '
        'kill -KILL -- "-$p" 2>/dev/null; true'
    )
    subprocess.run([*ssh, "bash", "-c", shlex.quote(stop)], check=False)
    time.sleep(3)  # Ray ends the actors of the gone driver
    return ready


def serve_rounds(rounds: int) -> dict[str, Any]:
    halo_ready, halo_total, bare = [], [], []
    with tempfile.TemporaryDirectory() as cwd:
        lab = Path(cwd) / "lab"
        subprocess.run([HALO, "lab", "up", "--name", "beng", "--dir", str(lab)], check=True)
        config = str(lab / "halo.toml")
        try:
            subprocess.run([HALO, "lab", "model", str(lab / "model")], check=True)
            subprocess.run([HALO, "up", "--config", config], check=True, capture_output=True)
            state = json.loads(next((lab / ".halo").glob("*.state.json")).read_text())
            for index in range(rounds):
                order = ("halo", "bare") if index % 2 == 0 else ("bare", "halo")
                for who in order:
                    if who == "bare":
                        bare.append(bare_serve(lab, state, str(lab / "model"), 8100))
                        continue
                    argv = [HALO, "serve", str(lab / "model"), "--config", config, "--json"]
                    took, done = timed(argv)
                    assert done.returncode == 0, done.stderr[-2000:]
                    halo_ready.append(json.loads(done.stdout)["ready_s"])
                    halo_total.append(round(took, 1))
                    subprocess.run([HALO, "stop", "--config", config], check=True)
        finally:
            subprocess.run([HALO, "down", "--config", config], capture_output=True)
            subprocess.run([HALO, "lab", "down", "--name", "beng", "--dir", str(lab)])
    return {
        "halo_ready_s": halo_ready,
        "halo_total_s": halo_total,
        "bare_ready_s": [round(b, 1) for b in bare],
        "median_halo_ready_s": statistics.median(halo_ready),
        "median_bare_ready_s": round(statistics.median(bare), 1),
        "ratio_halo_ready_to_bare": round(
            statistics.median(halo_ready) / statistics.median(bare), 2
        ),
        "ratio_halo_total_to_bare": round(
            statistics.median(halo_total) / statistics.median(bare), 2
        ),
        "target_ready_s": 90,
        "met": statistics.median(halo_ready) <= 90,
    }


def _ratio(a: list[float], b: list[float]) -> float:
    return round(statistics.median(a) / statistics.median(b), 2)


def demo() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as cwd:
        took, done = timed([HALO, "demo"], cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    return {"seconds": round(took, 1), "target_s": 240, "met": took <= 240}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-install", action="store_true")
    parser.add_argument("--skip-demo", action="store_true")
    args = parser.parse_args()
    out = HERE / "results" / "engine.json"
    result: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    result.update(
        {
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "python": platform.python_version(),
        }
    )
    if not args.skip_install:
        result["install"] = install()
        print("install", result["install"], flush=True)
    result["serve"] = serve_rounds(args.rounds)
    print("serve", result["serve"], flush=True)
    if not args.skip_demo:
        result["demo"] = demo()
        print("demo", result["demo"], flush=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
