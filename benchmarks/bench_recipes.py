"""The recipes of docs/recipes.md, measured: vLLM's prefix caching (TTFT of a request whose
long prefix the server saw before, against one whose prefix is new) and n-gram speculative
decoding (acceptance rate and decode tokens/s against the same server without it), each
passed to the engine through 'halo serve MODEL -- OPTIONS'. One node of a 2-node lab
(--nodes 1, TP=1: the recipe, not the fabric), the tiny model. Needs root and the engine
environment. Writes benchmarks/results/recipes.json.

    sudo .venv/bin/python benchmarks/bench_recipes.py [--repeats 5]

The peer of each recipe is the same server without it (--no-enable-prefix-caching; no
--speculative-config). Prefix: a prefix of 300 random words, then two different
questions after it: the first request meets a new prefix (cold), the second the cached one
(warm); each repeat has its own prefix. N-gram: 4 prompts, 128 tokens each, greedy; the
acceptance is vLLM's own counters (/metrics: accepted over drafted tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HALO = str(Path(sys.executable).parent / "halo")
NAME = "brec"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
         "prompt_lookup_min": 2}  # fmt: skip
VARIANTS: dict[str, list[str]] = {
    "no-prefix-caching": ["--no-enable-prefix-caching"],
    "prefix-caching": ["--enable-prefix-caching"],
    "ngram": ["--speculative-config", json.dumps(NGRAM)],
}


def sh(argv: list[str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def words(rng: random.Random, count: int) -> str:
    vocab = ["fabric", "node", "token", "cache", "rank", "layer", "model", "port", "queue"]
    return " ".join(rng.choice(vocab) for _ in range(count))


def ttft(url: str, model: str, prompt: str) -> float:
    from halo_cluster.bench.serve_load import Client, completion_body, stream_request

    client = Client(url, None)
    try:
        sample = stream_request(client, completion_body(model, prompt, 1))
    finally:
        client.close()
    if sample.error or sample.ttft_s is None:
        raise RuntimeError(sample.error or "no first token")
    return sample.ttft_s


def metric(url: str, name: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


def decode(url: str, model: str, prompts: list[str]) -> dict[str, Any]:
    from halo_cluster.bench.serve_load import Client, completion_body, stream_request

    client = Client(url, None)
    rates = []
    try:
        for prompt in prompts:
            sample = stream_request(client, completion_body(model, prompt, 128))
            if sample.error:
                raise RuntimeError(sample.error)
            rates.append(sample.tokens / max(sample.e2e_s - (sample.ttft_s or 0), 1e-9))
    finally:
        client.close()
    return {"decode_tokens_per_s": round(statistics.median(rates), 2)}


def measure(variant: str, url: str, model: str, repeats: int) -> dict[str, Any]:
    rng = random.Random(7)
    prompts = [words(random.Random(index), 40) for index in range(4)]  # the same in each
    if variant != "ngram":
        cold, warm = [], []
        for _ in range(repeats):
            prefix = words(rng, 300)
            cold.append(ttft(url, model, f"{prefix}\nQuestion one?"))
            warm.append(ttft(url, model, f"{prefix}\nQuestion two?"))
        return {
            "ttft_ms_new_prefix": round(statistics.median(cold) * 1e3, 2),
            "ttft_ms_seen_prefix": round(statistics.median(warm) * 1e3, 2),
            "repeats": repeats,
            **decode(url, model, prompts),  # the n-gram recipe's peer
        }
    before = (metric(url, "vllm:spec_decode_num_accepted_tokens_total"),
              metric(url, "vllm:spec_decode_num_draft_tokens_total"))  # fmt: skip
    found = decode(url, model, prompts)
    accepted = metric(url, "vllm:spec_decode_num_accepted_tokens_total") - before[0]
    drafted = metric(url, "vllm:spec_decode_num_draft_tokens_total") - before[1]
    found["acceptance_rate"] = round(accepted / drafted, 3) if drafted else None
    found["drafted_tokens"] = drafted
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the lab needs root")
    out: dict[str, Any] = {"benchmark": "recipes", "ngram": NGRAM, "variants": {}}
    with tempfile.TemporaryDirectory() as cwd:
        lab = Path(cwd) / "lab"
        config = str(lab / "halo.toml")
        up = sh([HALO, "lab", "up", "--nodes", "2", "--name", NAME, "--dir", str(lab),
                 "--no-llama-cpp"])  # fmt: skip
        if up.returncode != 0:
            raise SystemExit(f"halo lab up: {up.stderr.strip()[-400:]}")
        try:
            sh([HALO, "lab", "model", str(lab / "model")])
            status = sh([HALO, "lab", "status", "--name", NAME, "--dir", str(lab), "--json"])
            host = json.loads(status.stdout)["nodes"][0]["mgmt_address"]
            for variant, extra in VARIANTS.items():
                print(variant, file=sys.stderr)
                served = sh([HALO, "serve", str(lab / "model"), "--config", config,
                             "--executor", "mp", "--nodes", "1", "--tp", "1", "--host", host,
                             "--insecure",  # the lab's management bridge: this machine alone
                             "--no-supervise",
                             "--reference", "off", "--json", "--", *extra])  # fmt: skip
                try:
                    result = json.loads(served.stdout)
                except ValueError:
                    out["variants"][variant] = {"error": served.stderr.strip()[-600:]}
                    continue
                if result.get("stopped"):
                    out["variants"][variant] = {"error": "; ".join(result["problems"])}
                    continue
                url = result["url"]
                try:
                    out["variants"][variant] = measure(variant, url, result["model"], args.repeats)
                except (RuntimeError, OSError) as err:
                    out["variants"][variant] = {"error": str(err)[:600]}
                out["variants"][variant]["args"] = extra
                sh([HALO, "stop", "--config", config])
        finally:
            sh([HALO, "stop", "--config", config])
            sh([HALO, "lab", "down", "--name", NAME, "--dir", str(lab)])
    path = HERE / "results" / "recipes.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["variants"], indent=1))


if __name__ == "__main__":
    main()
