"""halo's supervisor against a plain restart policy, on a 2-node lab with the tiny model:
llama.cpp over RPC (llama-server on node1, ggml-rpc-server on node2) or vLLM's CPU build,
TP=2 over its own mp executor (the API server and rank 0 on node1, rank 1 headless on
node2). Needs root and the llama.cpp build or the engine environment. Writes the engine's
entry of benchmarks/results/supervise.json.

    sudo .venv/bin/python benchmarks/bench_supervise.py [--engine llama.cpp|vllm] [--runs 3]
        [--plain-wait 60]

Each fault is made while the server answers, and "serving again" is measured the same way
for both policies: a client inside node1 asks for one token every 0.25 s (5 s timeout) and
the time is that of its first answer after the fault took the server down (for a lost node:
after the node was booted again). For halo the supervisor's own 'serving' (both witnesses
proven again) is recorded next to it.

- halo: ``halo serve`` with its supervisor ([serve.supervise] interval_s = 2, deadline_s =
  10 for llama.cpp and 30 for vLLM, crash_restarts = 3; the rest as shipped), a fresh
  serve for every run (so that each run's restart is the first in its crash window).
- plain: ``halo serve --no-supervise``, then on each node a watcher that starts that node's
  process again whenever it exits, with the backoff of a container runtime's restart policy
  (0.1 s doubling to 60 s, reset after 10 s up, never giving up), from the same start step
  halo's supervisor replays. A node that boots again gets its watcher back, as a restart
  policy of a container comes back with its runtime. A fault it does not recover from within
  --plain-wait seconds is reported as not recovered; every plain run starts from a fresh serve.

Faults: the head's process killed (SIGKILL: llama-server, or vLLM's API server), node2's
killed (its rpc-server, or its rank), the head's process stopped (SIGSTOP: a wedge, the
process stays), node2 killed and booted again, and a crash loop (the model moved away, then
the head's process killed): halo must end in 'failed' after exactly crash_restarts attempts;
the plain policy's restarts in --plain-wait are counted. vLLM gets deadline_s = 30 (its first
tokens after a start can take seconds on a loaded CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HALO = str(Path(sys.executable).parent / "halo")
NAME = "bsup"
CRASH_RESTARTS = 3
DEADLINE_S = {"llama.cpp": 10, "vllm": 30}
BOUND_S = {"kill-head": 60, "kill-worker": 60, "wedge": 60, "node-lost": 120}
PID = '"${XDG_STATE_HOME:-$HOME/.local/state}/halo/serve-lab-' + NAME + '.pid"'


ENGINE_PROCESSES = "[v]llm serve|[V]LLM::|[l]lama-server|[g]gml-rpc-server"


def signal(name: str) -> str:
    """Send ``name`` to the process 'halo serve' started on the node."""
    return f'kill -{name} "$(cat {PID})"'


def supervise_table(engine: str) -> str:
    return (
        f"\n[serve.supervise]\ninterval_s = 2\ndeadline_s = {DEADLINE_S[engine]}\n"
        f"crash_restarts = {CRASH_RESTARTS}\n"
    )


# the client inside node1: one token every 0.25 s, one line per answer ("time ok|fail")
CLIENT = """
import json, sys, time, urllib.request
base, out = sys.argv[1], sys.argv[2]
model = None
with open(out, "a", buffering=1) as log:
    while True:
        began = time.time()
        try:
            if model is None:
                with urllib.request.urlopen(base + "/v1/models", timeout=5) as answer:
                    model = json.loads(answer.read())["data"][0]["id"]
            body = json.dumps({"model": model, "prompt": "hi", "max_tokens": 1}).encode()
            request = urllib.request.Request(
                base + "/v1/completions", body, {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=5) as answer:
                ok = answer.status == 200 and bool(json.loads(answer.read())["choices"])
        except Exception:
            ok, model = False, None
        log.write(f"{began:.3f} {'ok' if ok else 'fail'}\\n")
        time.sleep(max(0.0, 0.25 - (time.time() - began)))
"""

# the plain restart policy on one node: start its process again whenever it exits
WATCHER = """
start=$1; events=$2; delay=0.1; since=$(date +%s)
while true; do
  p=$(cat PIDFILE 2>/dev/null)
  if [ -n "$p" ] && kill -0 "$p" 2>/dev/null && \\
     [ "$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null)" != Z ]; then
    [ $(( $(date +%s) - since )) -ge 10 ] && delay=0.1
    sleep 0.5; continue
  fi
  sleep "$delay"
  echo "$(date +%s.%N) restart" >> "$events"
  bash "$start" > /dev/null 2>&1 || true
  since=$(date +%s)
  delay=$(awk -v d="$delay" 'BEGIN { d *= 2; if (d > 60) d = 60; print d }')
done
""".replace("PIDFILE", PID)


def sh(
    argv: list[str], check: bool = True, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    if check and done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} … failed: {done.stderr.strip()[-400:]}")
    return done


class Bench:
    def __init__(self, lab: Path, engine: str, runs: int, plain_wait: float) -> None:
        self.lab, self.engine, self.runs, self.plain_wait = lab, engine, runs, plain_wait
        self.config = str(lab / "halo.toml")
        self.home = lab / "home" / "node1"
        self.answers = self.home / "bench-client.log"
        self.model = lab / ("model.gguf" if engine == "llama.cpp" else "model")
        self.client: subprocess.Popen[str] | None = None

    # -- the lab --------------------------------------------------------------------------
    def on(self, node: str, script: str, check: bool = False) -> str:
        argv = [HALO, "lab", "exec", "--dir", str(self.lab), node, "--", "bash", "-c", script]
        return sh(argv, check=check).stdout

    def lab_cmd(self, *args: str) -> None:
        sh([HALO, "lab", *args, "--dir", str(self.lab)])

    def serve(self, supervise: bool) -> None:
        argv = [HALO, "serve", str(self.model), "--engine", self.engine, "--config", self.config]
        if self.engine == "vllm":
            argv += ["--executor", "mp"]
        sh([*argv, "--json"] + ([] if supervise else ["--no-supervise"]))

    def stop(self) -> None:
        sh([HALO, "stop", "--config", self.config], check=False)

    # -- the client -----------------------------------------------------------------------
    def start_client(self) -> None:
        (self.home / "bench-client.py").write_text(CLIENT)
        url = "http://127.0.0.1:8000"
        self.client = subprocess.Popen(
            [HALO, "lab", "exec", "--dir", str(self.lab), "node1", "--", "python3",
             str(self.home / "bench-client.py"), url, str(self.answers)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip

    def answers_since(self, since: float) -> list[tuple[float, bool]]:
        try:
            lines = self.answers.read_text().splitlines()
        except FileNotFoundError:
            return []
        found = []
        for line in lines:
            at, _, what = line.partition(" ")
            try:
                if float(at) >= since:
                    found.append((float(at), what == "ok"))
            except ValueError:
                continue  # a line being written
        return found

    def answering(self, within: float = 120) -> None:
        """Until the client's last three answers are tokens."""
        deadline = time.time() + within
        while time.time() < deadline:
            last = self.answers_since(time.time() - 3)[-3:]
            if len(last) == 3 and all(ok for _, ok in last):
                return
            time.sleep(0.25)
        raise SystemExit(f"the server did not answer within {within:g} s")

    def back_after(self, since: float, within: float) -> float | None:
        """Seconds from ``since`` to the first token after the server went down."""
        deadline = since + within
        while time.time() < deadline:
            answers = self.answers_since(since)
            down = next((i for i, (_, ok) in enumerate(answers) if not ok), None)
            if down is not None:
                back = next((at for at, ok in answers[down:] if ok), None)
                if back is not None:
                    return round(back - since, 2)
            time.sleep(0.25)
        return None

    # -- halo's supervisor ------------------------------------------------------------------
    def supervisor(self) -> dict[str, Any]:
        path = self.home / ".local/state/halo" / f"supervise-lab-{NAME}.json"
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return data

    def until(self, check: Callable[[dict[str, Any]], bool], within: float = 240) -> dict[str, Any]:
        deadline = time.time() + within
        while time.time() < deadline:
            found = self.supervisor()
            if found and check(found):
                return found
            time.sleep(0.2)
        raise SystemExit(f"the supervisor did not get there within {within:g} s: {found}")

    def proven_at(self, since: float) -> float | None:
        serving = [h["at"] for h in self.supervisor().get("history", []) if h["state"] == "serving"]
        after = [at for at in serving if at > since]
        return round(after[0] - since, 2) if after else None

    # -- faults -----------------------------------------------------------------------------
    def inject(self, fault: str) -> float:
        """Make ``fault``; the time the server is expected to be back from."""
        if fault == "kill-head":
            self.on("node1", signal("KILL"))
        elif fault == "kill-worker":
            self.on("node2", signal("KILL"))
        elif fault == "wedge":
            self.on("node1", signal("STOP"))
        elif fault == "node-lost":
            self.lab_cmd("kill", "node2")
            self.down_for = time.time()
            time.sleep(10)  # the node stays away for 10 s
            self.lab_cmd("heal", "node2")
            return time.time()
        return time.time()

    def halo_start(self) -> None:
        """A fresh serve and supervisor: every run starts with an empty crash window (the
        restarts of earlier runs would otherwise count towards K)."""
        self.stop()
        self.serve(supervise=True)
        self.until(lambda s: s["state"] == "serving" and bool(s.get("last_probe")))

    def halo_fault(self, fault: str) -> dict[str, Any]:
        self.halo_start()
        before = self.supervisor()["restarts"]
        self.answering()
        t0 = time.time()
        back_from = self.inject(fault)
        if fault == "node-lost":
            seen = [h["at"] for h in self.supervisor()["history"] if h["state"] == "degraded"]
            degraded = round(min(a for a in seen if a >= t0) - t0, 2) if seen else None
        back = self.back_after(back_from, BOUND_S[fault] + 60)
        after = self.until(lambda s: s["state"] == "serving" and s["restarts"] > before)
        row: dict[str, Any] = {
            "serving_again_s": back,
            "proven_s": self.proven_at(back_from),
            "restarts": after["restarts"] - before,
            "cause": next(
                (h["cause"] for h in reversed(after["history"]) if h["state"] == "restarting"), None
            ),
        }
        if fault == "node-lost":
            row["degraded_after_s"] = degraded
        return row

    def halo_crash_loop(self) -> dict[str, Any]:
        self.halo_start()
        self.answering()
        before = self.supervisor()["attempts"]
        away = self.model.with_suffix(".away")
        self.model.rename(away)
        t0 = time.time()
        self.on("node1", signal("KILL"))
        failed = self.until(lambda s: s["state"] == "failed", within=600)
        took = round(next(h["at"] for h in failed["history"] if h["state"] == "failed") - t0, 2)
        time.sleep(10)  # no restart after 'failed'
        later = self.supervisor()
        away.rename(self.model)
        return {
            "failed_after_s": took,
            "attempts": failed["attempts"] - before,
            "attempts_10s_later": later["attempts"] - before,
            "expected_attempts": CRASH_RESTARTS,
            "cause": failed.get("cause"),
        }

    # -- the plain policy -------------------------------------------------------------------
    def plain_start(self, steps: dict[str, str]) -> None:
        self.serve(supervise=False)
        for node in steps:
            self.watch(node, steps)

    def watch(self, node: str, steps: dict[str, str]) -> None:
        home = self.lab / "home" / node
        (home / "bench-start.sh").write_text(steps[node])
        (home / "bench-watcher.sh").write_text(WATCHER)
        watcher = f"{home}/bench-watcher.sh {home}/bench-start.sh {home}/bench-restarts.log"
        self.on(node, f"setsid -f bash {watcher} > /dev/null 2>&1 < /dev/null", check=True)

    def plain_stop(self) -> int:
        """Stop the watchers and the server ('halo stop', which ends the process group it
        started last), then count and end what the restarts left beside it (a killed head's
        children), so that the next run starts clean. The count is returned."""
        for node in ("node1", "node2"):
            self.on(node, f"pkill -f bench-watcher.sh; {signal('CONT')}; true")
        self.stop()
        left = 0
        for node in ("node1", "node2"):
            found = self.on(node, f"pgrep -f '{ENGINE_PROCESSES}' || true").split()
            left += len(found)
            self.on(node, f"pkill -KILL -f '{ENGINE_PROCESSES}'; rm -f /dev/shm/*; true")
        return left

    def plain_restarts(self, since: float) -> int:
        count = 0
        for node in ("node1", "node2"):
            log = self.lab / "home" / node / "bench-restarts.log"
            lines = log.read_text().split() if log.exists() else []
            count += sum(1 for w in lines if w != "restart" and float(w) >= since)
        return count

    def plain_fault(self, fault: str, steps: dict[str, str]) -> dict[str, Any]:
        self.plain_start(steps)
        try:
            self.answering()
            t0 = time.time()
            if fault == "node-lost":
                self.lab_cmd("kill", "node2")
                time.sleep(10)
                self.lab_cmd("heal", "node2")
                self.watch("node2", steps)  # the restart policy comes back with the node
                back_from = time.time()
            else:
                back_from = self.inject(fault)
            back = self.back_after(back_from, self.plain_wait)
            row: dict[str, Any] = {"serving_again_s": back, "restarts": self.plain_restarts(t0)}
        finally:
            left = self.plain_stop()
        row["left_after_stop"] = left
        return row

    def plain_crash_loop(self, steps: dict[str, str]) -> dict[str, Any]:
        self.plain_start(steps)
        away = self.model.with_suffix(".away")
        try:
            self.answering()
            self.model.rename(away)
            t0 = time.time()
            self.on("node1", signal("KILL"))
            time.sleep(self.plain_wait)
            return {"restarts_in_wait": self.plain_restarts(t0), "wait_s": self.plain_wait}
        finally:
            away.rename(self.model)
            self.plain_stop()


def start_steps(spec: dict[str, Any]) -> dict[str, str]:
    """Each node's step that starts its process (the supervisor's recorded start)."""
    return {s["node"]: s["stdin"] for s in spec["start"] if "setsid " in (s.get("stdin") or "")}


def summary(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    values = [r[key] for r in rows]
    done = [v for v in values if v is not None]
    return {
        "median": round(statistics.median(done), 2) if len(done) == len(values) else None,
        "recovered": f"{len(done)}/{len(values)}",
        "runs": values,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("llama.cpp", "vllm"), default="llama.cpp")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--plain-wait", type=float, default=60.0)
    parser.add_argument("--faults", default="kill-head,kill-worker,wedge,node-lost")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the lab needs root")
    faults = [f for f in args.faults.split(",") if f]
    table = supervise_table(args.engine)
    result: dict[str, Any] = {
        "settings": table.strip(),
        "runs": args.runs,
        "plain_wait_s": args.plain_wait,
        "incomplete": True,
        "faults": {},
    }
    with tempfile.TemporaryDirectory() as cwd:
        lab = Path(cwd) / "lab"
        up = [HALO, "lab", "up", "--name", NAME, "--dir", str(lab)]
        sh(up + (["--no-engine"] if args.engine == "llama.cpp" else ["--no-llama-cpp"]))
        bench = Bench(lab, args.engine, args.runs, args.plain_wait)
        try:
            if args.engine == "llama.cpp":
                sh([HALO, "lab", "model", str(Path(cwd) / "m"), "--format", "gguf"])
                bench.model.write_bytes((Path(cwd) / "m" / "model.gguf").read_bytes())
            else:
                sh([HALO, "lab", "model", str(bench.model)])
            with open(bench.config, "a") as config:
                config.write(table)
            bench.start_client()
            print("halo's supervisor", file=sys.stderr)
            bench.serve(supervise=True)
            bench.until(lambda s: s["state"] == "serving")
            spec_path = bench.home / ".local/state/halo" / f"supervise-lab-{NAME}.spec.json"
            steps = start_steps(json.loads(spec_path.read_text()))
            for fault in faults:
                rows = []
                for run in range(args.runs):
                    rows.append(bench.halo_fault(fault))
                    print(f"  halo {fault} #{run + 1}: {rows[-1]}", file=sys.stderr)
                result["faults"][fault] = {
                    "bound_s": BOUND_S[fault],
                    "halo": {"serving_again_s": summary(rows, "serving_again_s"),
                             "proven_s": summary(rows, "proven_s"), "rows": rows},
                }  # fmt: skip
                save(args.engine, result)
            crash = bench.halo_crash_loop()
            print(f"  halo crash loop: {crash}", file=sys.stderr)
            bench.stop()
            print("plain restart policy", file=sys.stderr)
            for fault in faults:
                rows = []
                for run in range(args.runs):
                    rows.append(bench.plain_fault(fault, steps))
                    print(f"  plain {fault} #{run + 1}: {rows[-1]}", file=sys.stderr)
                result["faults"][fault]["plain"] = {
                    "serving_again_s": summary(rows, "serving_again_s"), "rows": rows
                }  # fmt: skip
                save(args.engine, result)
            plain_crash = bench.plain_crash_loop(steps)
            print(f"  plain crash loop: {plain_crash}", file=sys.stderr)
            result["crash_loop"] = {"halo": crash, "plain": plain_crash}
        finally:
            if bench.client is not None:
                bench.client.terminate()
            bench.plain_stop()
            sh([HALO, "lab", "down", "--dir", str(lab)], check=False)
    result.pop("incomplete", None)
    save(args.engine, result)
    print(json.dumps(result, indent=2))


def save(engine: str, result: dict[str, Any]) -> None:
    """The engine's entry of the results file (kept after each fault: a run cut short keeps
    what it measured, marked incomplete)."""
    path = HERE / "results" / "supervise.json"
    try:
        kept = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        kept = {}
    kept[engine] = result
    path.write_text(json.dumps(kept, indent=2) + "\n")


if __name__ == "__main__":
    main()
