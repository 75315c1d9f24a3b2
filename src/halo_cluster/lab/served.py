"""The servers ``halo lab profile`` starts on this machine, and their timing: wait until a
process serves (naming one that exits first), stop them all (together, then killed), and
streamed completions timed on several OpenAI-compatible servers in turns."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from halo_cluster.bounded.httpget import http_get
from halo_cluster.errors import HaloError

SETTLE_S = 1.5  # between two requests: vLLM's engine core spins 1 s after its last step


def interleaved_decode(
    servers: dict[int, int],
    requests: int,
    progress: Callable[[str], None] | None = None,
    tokens: int = 64,
) -> dict[int, list[float]]:
    """Seconds per output token of ``requests`` streamed completions on each server
    (key: its TP size, value: its port), the servers taking turns (the order reversed every
    round); each server's first completion is a warm-up. Between two requests the machine
    rests ``SETTLE_S``: vLLM's engine core spins for a second after its last step."""
    found: dict[int, list[float]] = {key: [] for key in servers}
    what = {key: f"vllm serve (TP={key})" for key in servers}
    models = {key: _model_id(port, what[key]) for key, port in servers.items()}  # asked once
    order = list(servers)
    for round_ in range(requests + 1):
        for key in order if round_ % 2 == 0 else order[::-1]:
            seconds = _token_seconds(servers[key], models[key], what[key], tokens)
            if round_:
                found[key].append(seconds)
            time.sleep(SETTLE_S)
        if progress and round_:
            progress(f"vLLM: {round_} of {requests} rounds of requests")
    return found


def _token_seconds(port: int, model: str, what: str, tokens: int) -> float:
    """Seconds per token of one streamed completion of ``tokens`` tokens: (last chunk's
    arrival - first's) / (tokens between them); fewer than half of them streamed is an error.

    A server that falls behind its client sends several tokens in one chunk, so the count
    is the server's own (``continuous_usage_stats``: the tokens so far, in every chunk);
    a server that does not report it is counted one token a chunk."""
    import http.client
    import json

    body = json.dumps({
        "prompt": "The lab measures", "max_tokens": tokens, "temperature": 0,
        "stream": True, "ignore_eos": True, "model": model,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    })  # fmt: skip
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            raise HaloError(f"{what}: HTTP {response.status} for a completion")
        marks: list[tuple[float, int]] = []  # (arrival, tokens so far)
        for line in response:
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            arrival = time.perf_counter()
            so_far = _tokens_so_far(line[6:], (marks[-1][1] if marks else 0) + 1)
            if so_far is not None:
                marks.append((arrival, so_far))
    except OSError as err:
        raise HaloError(f"{what}: the completion failed: {err}") from None
    finally:
        conn.close()
    streamed = marks[-1][1] if marks else 0
    if len(marks) < 2 or streamed < max(2, tokens // 2) or marks[-1][1] <= marks[0][1]:
        raise HaloError(f"{what}: only {streamed} of {tokens} tokens streamed")
    return (marks[-1][0] - marks[0][0]) / (marks[-1][1] - marks[0][1])


def _tokens_so_far(data: bytes, counted: int) -> int | None:
    """The completion tokens a chunk says were made so far; ``counted`` (one a chunk) where
    it says nothing; None for a chunk that carries no text (the closing usage-only one)."""
    import json

    try:
        chunk = json.loads(data)
    except ValueError:
        return counted
    if not isinstance(chunk, dict):
        return counted
    if chunk.get("choices") == []:
        return None
    usage = chunk.get("usage")
    made = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return made if isinstance(made, int) and not isinstance(made, bool) and made > 0 else counted


def _model_id(port: int, what: str) -> str:
    import json

    try:
        listed = json.loads(http_get(f"http://127.0.0.1:{port}/v1/models", timeout_s=30))
        found: str = listed["data"][0]["id"]
        return found
    except (OSError, ValueError, KeyError, IndexError, TypeError) as err:
        raise HaloError(f"{what}: no model listed on port {port}: {err}") from None


def healthy(port: int) -> bool:
    try:
        http_get(f"http://127.0.0.1:{port}/health")
        return True
    except OSError:
        return False


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def wait_all(processes: list[Any], ready: Callable[[], bool], what: str, seconds: float) -> None:
    """Poll ``ready`` until it holds; one line when a process exits first or time runs out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for process in processes:
            if process.poll() is not None:
                raise HaloError(f"{what} exited ({process.returncode}) before it was ready")
        if ready():
            return
        time.sleep(0.2)
    raise HaloError(f"{what} was not ready within {seconds:g} s")


def stop_all(processes: list[Any]) -> None:
    """End servers started in their own sessions and everything they started: all asked at
    once, then each given 30 s; what is left then (or at a Ctrl-C meanwhile) is killed."""
    import signal
    import subprocess

    def kill() -> None:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        for process in processes:
            process.wait()

    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30.0
    try:
        for process in processes:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:  # not ended in time: no more asking
        kill()
    except KeyboardInterrupt:
        kill()
        raise


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
