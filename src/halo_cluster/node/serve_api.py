"""Node side: talk to the OpenAI-compatible server on this node (``serve-health``,
``serve-probe``). Run on the head over SSH, so a server bound to 127.0.0.1 is reached too.
The answers are the wire's (``wire/answers.py``)."""

from __future__ import annotations

import json
import math
import time
import urllib.request
from typing import Any

from halo_cluster.bounded.httpget import http_get
from halo_cluster.bounded.jsonin import loads
from halo_cluster.jsonout import JsonObject
from halo_cluster.wire.answers import (
    ServeHealth,
    ServeProbe,
    ServeTokens,
    TokenAnswer,
    TokenStep,
)

PROBE_PROMPT = "The fabric between the nodes carries"


def _get(url: str, key: str | None, timeout_s: float) -> str:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return http_get(url, headers, timeout_s, 1 << 20).decode("utf-8", "replace")


def health(host: str, port: int, key: str | None, timeout_s: float = 5.0) -> ServeHealth:
    """GET /health (any answer but an HTTP error will do) and /v1/models of the server on this
    node: the ids of the models it lists (None for an entry without one)."""
    base = f"http://{host}:{port}"
    _get(f"{base}/health", key, timeout_s)
    listed = loads(_get(f"{base}/v1/models", key, timeout_s))
    models = listed.get("data") if isinstance(listed, dict) else None
    return ServeHealth(tuple(_model_id(m) for m in models) if isinstance(models, list) else ())


def _model_id(entry: Any) -> str | None:
    found = entry.get("id") if isinstance(entry, dict) else None
    return found if isinstance(found, str) else None


def served_model(host: str, port: int, key: str | None, timeout_s: float = 5.0) -> str:
    data = loads(_get(f"http://{host}:{port}/v1/models", key, timeout_s))
    models = data.get("data") if isinstance(data, dict) else None
    if not models or not isinstance(models[0], dict) or not isinstance(models[0].get("id"), str):
        raise ValueError("the server lists no model at /v1/models")
    model: str = models[0]["id"]
    return model


def _completion(
    host: str, port: int, key: str | None, body: JsonObject, timeout_s: float
) -> tuple[Any, float]:
    """POST /v1/completions: the answer (JSON within bounds, bounded/jsonin.py: a number
    that is not finite read as None) and the seconds it took; ValueError (one line) for
    anything else."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(
        f"http://{host}:{port}/v1/completions",
        data=json.dumps(body).encode(),
        headers=headers,
        method="POST",
    )
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        data = loads(response.read(1 << 22), non_finite_as_none=True)
    return data, time.perf_counter() - start


def _greedy(model: str, prompt: str, tokens: int) -> JsonObject:
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": tokens,
        "temperature": 0.0,
        "ignore_eos": True,
    }


def complete(
    host: str, port: int, key: str | None, tokens: int, timeout_s: float = 120.0
) -> ServeProbe:
    """One greedy completion of exactly ``tokens`` tokens (EOS ignored): the tokens the
    server says it generated (its ``usage``) and the seconds it took."""
    model = served_model(host, port, key)
    body = _greedy(model, PROBE_PROMPT, tokens)
    data, seconds = _completion(host, port, key, body, timeout_s)
    usage = data.get("usage") if isinstance(data, dict) else None
    generated = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not isinstance(generated, int):
        raise ValueError("the server's answer has no usage.completion_tokens")
    return ServeProbe(model, generated, round(seconds, 4))


def greedy_answers(
    host: str,
    port: int,
    key: str | None,
    prompts: list[str],
    tokens: int,
    top: int,
    timeout_s: float = 300.0,
) -> ServeTokens:
    """The greedy answer of exactly ``tokens`` tokens to each prompt, one request at a time,
    asking for each step's ``top`` likeliest tokens: the token witness's evidence."""
    model = served_model(host, port, key)
    answers = []
    for prompt in prompts:
        body = {**_greedy(model, prompt, tokens), "logprobs": top}
        data, _seconds = _completion(host, port, key, body, timeout_s)
        answers.append(answer_of(data))
    return ServeTokens(model, tuple(answers))


def answer_of(data: Any) -> TokenAnswer:
    """A completion's text and tokens. Two shapes of ``logprobs`` are read: the completions
    API's columns (tokens, token_logprobs, top_logprobs: vLLM) and a list of steps
    (``content``: each with id, token, logprob, top_logprobs: llama-server). None: the
    text alone. A log-probability that is not a finite number is unknown (None), an
    alternative without one is left out, and any other shape is one ValueError."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the server's answer has no choices")
    choice = choices[0]
    text = choice.get("text")
    if not isinstance(text, str):
        raise ValueError("the server's answer has no text")
    found = choice.get("logprobs")
    if isinstance(found, dict) and isinstance(found.get("content"), list):
        return TokenAnswer(text, tuple(_content_step(s) for s in found["content"]))
    if isinstance(found, dict) and isinstance(found.get("tokens"), list):
        return TokenAnswer(text, _column_steps(found))
    return TokenAnswer(text, ())


def _number(value: Any) -> float | None:
    """A finite log-probability, or None (NaN, ±Infinity, anything not a number)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _token_id(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _listed(value: Any, what: str) -> list[Any]:
    """``value`` when it is a list, [] when absent (null); ValueError otherwise."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"the server's logprobs have {what} that is not a list")
    return value


def _content_step(step: Any) -> TokenStep:
    if not isinstance(step, dict) or not isinstance(step.get("token"), str):
        raise ValueError("a step of the server's logprobs has no token")
    top = []
    for alt in _listed(step.get("top_logprobs"), "a step's top_logprobs"):
        if isinstance(alt, dict) and isinstance(alt.get("token"), str):
            alt_id = _token_id(alt.get("id"))
            key = f"#{alt_id}" if alt_id is not None else alt["token"]
            logprob = _number(alt.get("logprob"))
            if logprob is not None:
                top.append((key, logprob))
    return TokenStep(
        step["token"], _token_id(step.get("id")), _number(step.get("logprob")), tuple(top)
    )


def _column_steps(found: dict[str, Any]) -> tuple[TokenStep, ...]:
    tokens = found["tokens"]
    logprobs = _listed(found.get("token_logprobs"), "token_logprobs") or [None] * len(tokens)
    tops = _listed(found.get("top_logprobs"), "top_logprobs") or [None] * len(tokens)
    if not len(tokens) == len(logprobs) == len(tops):
        raise ValueError("the server's logprobs have columns of different lengths")
    steps = []
    for token, logprob, top in zip(tokens, logprobs, tops):
        if not isinstance(token, str):
            raise ValueError("a token of the server's logprobs is not a string")
        alts = top.items() if isinstance(top, dict) else ()
        pairs = tuple((k, v) for k, v in ((k, _number(v)) for k, v in alts) if v is not None)
        steps.append(TokenStep(token, None, _number(logprob), pairs))
    return tuple(steps)
