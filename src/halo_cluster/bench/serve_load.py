"""An OpenAI-compatible streaming load generator: per concurrency level, time to first
token, inter-token latency, end-to-end latency (p50/p90/p99) and output tokens/s."""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from halo_cluster.monitor.probes import quantile

SCHEMA = "halo.bench.serve/1"


@dataclass
class Sample:
    ttft_s: float | None = None
    gaps_s: list[float] = field(default_factory=list)
    e2e_s: float = 0.0
    tokens: int = 0
    error: str | None = None


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50/p90/p99 of seconds, in ms."""
    picked = {f"p{round(q * 100)}": quantile(values, q) for q in (0.5, 0.9, 0.99)}
    return {k: None if v is None else round(v * 1e3, 3) for k, v in picked.items()}


def one_request(
    url: str, model: str, prompt: str, max_tokens: int, key: str | None, timeout_s: float
) -> Sample:
    parts = urllib.parse.urlsplit(url)
    conn_type = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    conn = conn_type(parts.hostname or "127.0.0.1", parts.port, timeout=timeout_s)
    body = json.dumps(
        {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "stream": True,
            "temperature": 0.0,
            "ignore_eos": True,
        }
    )
    headers = {
        "Content-Type": "application/json",
        **({"Authorization": f"Bearer {key}"} if key else {}),
    }
    sample = Sample()
    start = time.perf_counter()
    last = start
    try:
        conn.request(
            "POST", (parts.path.rstrip("/") or "") + "/v1/completions", body=body, headers=headers
        )
        response = conn.getresponse()
        if response.status != 200:
            sample.error = (
                f"HTTP {response.status}: {response.read()[:200].decode('utf-8', 'replace')}"
            )
            return sample
        for raw in response:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            choice = (json.loads(data).get("choices") or [{}])[0]
            if not (choice.get("text") or (choice.get("delta") or {}).get("content")):
                continue
            now = time.perf_counter()
            if sample.ttft_s is None:
                sample.ttft_s = now - start
            else:
                sample.gaps_s.append(now - last)
            last = now
            sample.tokens += 1
    except (OSError, http.client.HTTPException, ValueError) as err:
        sample.error = f"{type(err).__name__}: {err}"
    finally:
        sample.e2e_s = time.perf_counter() - start
        conn.close()
    return sample


def run_level(
    url: str,
    model: str,
    concurrency: int,
    prompts: int,
    input_len: int,
    output_len: int,
    key: str | None,
    timeout_s: float = 300.0,
) -> dict[str, Any]:
    prompt = " ".join(["hello"] * input_len)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        samples = list(
            pool.map(
                lambda _i: one_request(url, model, prompt, output_len, key, timeout_s),
                range(prompts),
            )
        )
    wall = time.perf_counter() - start
    good = [s for s in samples if s.error is None]
    errors = [s.error for s in samples if s.error]
    return {
        "concurrency": concurrency,
        "requests": len(samples),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "ttft_ms": percentiles([s.ttft_s for s in good if s.ttft_s is not None]),
        "itl_ms": percentiles([g for s in good for g in s.gaps_s]),
        "e2e_ms": percentiles([s.e2e_s for s in good]),
        "output_tokens": sum(s.tokens for s in good),
        "output_tokens_per_s": round(sum(s.tokens for s in good) / wall, 3) if wall > 0 else None,
        "wall_s": round(wall, 3),
    }


def model_id(url: str, key: str | None, timeout_s: float = 10.0) -> str:
    import urllib.request

    request = urllib.request.Request(
        url.rstrip("/") + "/v1/models", headers={"Authorization": f"Bearer {key}"} if key else {}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return str(json.load(response)["data"][0]["id"])


def run(
    url: str,
    model: str | None,
    levels: list[int],
    prompts: int,
    input_len: int,
    output_len: int,
    key: str | None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    model = model or model_id(url, key)
    results = []
    for concurrency in levels:
        if progress:
            progress(f"concurrency {concurrency}: {prompts} requests")
        results.append(run_level(url, model, concurrency, prompts, input_len, output_len, key))
    return {
        "schema": SCHEMA,
        "kind": "serve",
        "url": url,
        "model": model,
        "input_len": input_len,
        "output_len": output_len,
        "levels": results,
    }
