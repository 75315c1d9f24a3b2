"""Node side: talk to the OpenAI-compatible server on this node (``halo serve-health``,
``halo serve-probe``). Run on the head over SSH, so a server bound to 127.0.0.1 is
reached too."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from halo_cluster.httpget import http_get

PROBE_PROMPT = "The fabric between the nodes carries"


def _get(url: str, key: str | None, timeout_s: float) -> str:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return http_get(url, headers, timeout_s, 1 << 20).decode("utf-8", "replace")


def health(host: str, port: int, key: str | None, timeout_s: float = 5.0) -> dict[str, Any]:
    """GET /health and /v1/models of the server on this node."""
    base = f"http://{host}:{port}"
    return {
        "/health": _get(f"{base}/health", key, timeout_s),
        "/v1/models": json.loads(_get(f"{base}/v1/models", key, timeout_s)),
    }


def served_model(host: str, port: int, key: str | None, timeout_s: float = 5.0) -> str:
    data = json.loads(_get(f"http://{host}:{port}/v1/models", key, timeout_s))
    models = data.get("data") if isinstance(data, dict) else None
    if not models or not isinstance(models[0], dict) or not isinstance(models[0].get("id"), str):
        raise ValueError("the server lists no model at /v1/models")
    model: str = models[0]["id"]
    return model


def complete(
    host: str, port: int, key: str | None, tokens: int, timeout_s: float = 120.0
) -> dict[str, Any]:
    """One greedy completion of exactly ``tokens`` tokens (EOS ignored): the tokens the
    server says it generated (its ``usage``) and the seconds it took."""
    model = served_model(host, port, key)
    body = json.dumps(
        {
            "model": model,
            "prompt": PROBE_PROMPT,
            "max_tokens": tokens,
            "temperature": 0.0,
            "ignore_eos": True,
        }
    ).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(
        f"http://{host}:{port}/v1/completions", data=body, headers=headers, method="POST"
    )
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        data = json.loads(response.read(1 << 22))
    seconds = time.perf_counter() - start
    usage = data.get("usage") if isinstance(data, dict) else None
    generated = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not isinstance(generated, int):
        raise ValueError("the server's answer has no usage.completion_tokens")
    return {"model": model, "completion_tokens": generated, "seconds": round(seconds, 4)}
