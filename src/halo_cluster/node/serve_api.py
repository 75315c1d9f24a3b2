"""Node side: talk to the OpenAI-compatible server on this node (``serve-health``,
``serve-probe``). Run on the head over SSH, so a server bound to 127.0.0.1 is reached too.
The answers are the wire's (``wire/answers.py``)."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from halo_cluster.httpget import http_get
from halo_cluster.wire.answers import ServeHealth, ServeProbe

PROBE_PROMPT = "The fabric between the nodes carries"


def _get(url: str, key: str | None, timeout_s: float) -> str:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return http_get(url, headers, timeout_s, 1 << 20).decode("utf-8", "replace")


def health(host: str, port: int, key: str | None, timeout_s: float = 5.0) -> ServeHealth:
    """GET /health (any answer but an HTTP error will do) and /v1/models of the server on this
    node: the ids of the models it lists (None for an entry without one)."""
    base = f"http://{host}:{port}"
    _get(f"{base}/health", key, timeout_s)
    listed = json.loads(_get(f"{base}/v1/models", key, timeout_s))
    models = listed.get("data") if isinstance(listed, dict) else None
    return ServeHealth(tuple(_model_id(m) for m in models) if isinstance(models, list) else ())


def _model_id(entry: Any) -> str | None:
    found = entry.get("id") if isinstance(entry, dict) else None
    return found if isinstance(found, str) else None


def served_model(host: str, port: int, key: str | None, timeout_s: float = 5.0) -> str:
    data = json.loads(_get(f"http://{host}:{port}/v1/models", key, timeout_s))
    models = data.get("data") if isinstance(data, dict) else None
    if not models or not isinstance(models[0], dict) or not isinstance(models[0].get("id"), str):
        raise ValueError("the server lists no model at /v1/models")
    model: str = models[0]["id"]
    return model


def complete(
    host: str, port: int, key: str | None, tokens: int, timeout_s: float = 120.0
) -> ServeProbe:
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
    return ServeProbe(model, generated, round(seconds, 4))
