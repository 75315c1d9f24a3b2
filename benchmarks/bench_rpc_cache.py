"""llama.cpp's worker tensor cache (`ggml-rpc-server -c`, in each node's model store) on a
2-node lab: the first load of a model sends its tensors to the worker; the second sends the
big ones as hashes and the worker reads them from its own disk. Measured: `halo serve` ready
time and the bytes the worker received on its fabric interface during each load (needs
root and the llama.cpp build). Writes benchmarks/results/rpc_cache.json.

    sudo .venv/bin/python benchmarks/bench_rpc_cache.py [--runs 3]

The model is a Llama of the lab's tiny family made wide enough that its feed-forward tensors
(2048 x 4096, f16: 16 MiB) pass rpc-server's 10 MiB threshold for sending a hash instead of
the data; smaller tensors (attention, 8 MiB) are sent every time.
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
HALO = str(Path(sys.executable).parent / "halo")
RX = "cat /sys/class/net/enp194s0np0/statistics/rx_bytes"


def sh(argv: list[str], cwd: str) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.strip()[-400:]}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from halo_cluster.lab.tiny_model import write_model
    from halo_cluster.lab.tiny_spec import TinyModelSpec

    with tempfile.TemporaryDirectory() as cwd:
        lab = Path(cwd) / "lab"
        sh([HALO, "lab", "up", "--name", "brpc", "--dir", str(lab), "--no-engine"], cwd)
        config = str(lab / "halo.toml")
        try:
            spec = TinyModelSpec(layers=2, hidden=2048, heads=16, kv_heads=4)
            made = write_model(Path(cwd) / "wide", spec, formats=("gguf",))
            sh([HALO, "model", "sync", str(Path(cwd) / "wide" / "model.gguf"), "--name", "wide",
                "--config", config], cwd)  # fmt: skip

            def load() -> dict[str, float]:
                before = int(sh([HALO, "lab", "exec", "--dir", str(lab), "node2", "--", "bash",
                                 "-c", RX], cwd))  # fmt: skip
                start = time.perf_counter()
                out = sh([HALO, "serve", "wide", "--engine", "llama.cpp", "--config", config,
                          "--json", "--wait", "300"], cwd)  # fmt: skip
                took = time.perf_counter() - start
                after = int(sh([HALO, "lab", "exec", "--dir", str(lab), "node2", "--", "bash",
                                "-c", RX], cwd))  # fmt: skip
                ready = json.loads(out)["ready_s"]
                sh([HALO, "stop", "--config", config], cwd)
                return {
                    "serve_s": round(took, 2),
                    "ready_s": ready,
                    "worker_rx_mb": round((after - before) / 1e6, 1),
                }

            first = load()  # the worker's cache is empty
            again = [load() for _ in range(args.runs)]
            cache = sh([HALO, "lab", "exec", "--dir", str(lab), "node2", "--", "bash", "-c",
                        "du -sb /var/lib/halo/models/.rpc-cache | cut -f1"], cwd)  # fmt: skip
        finally:
            subprocess.run(
                [HALO, "lab", "down", "--dir", str(lab)], cwd=cwd, check=False, capture_output=True
            )
    result = {
        "benchmark": "rpc_cache",
        "machine": {"cpus": os.cpu_count()},
        "model": {"parameters": made.parameters, "spec": "layers 2, hidden 2048, heads 16/4, f16"},
        "first_load": first,
        "cached_loads": again,
        "cached_median": {
            k: statistics.median(r[k] for r in again)
            for k in ("serve_s", "ready_s", "worker_rx_mb")
        },
        "worker_cache_mb": round(int(cache.strip() or 0) / 1e6, 1),
    }
    (HERE / "results" / "rpc_cache.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
