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
    """Seconds per token of one streamed completion of ``tokens`` tokens: (last token's
    arrival - first's) / (tokens streamed - 1); fewer than half of them streamed is an error."""
    import http.client
    import json

    body = json.dumps({
        "prompt": "The lab measures", "max_tokens": tokens, "temperature": 0,
        "stream": True, "ignore_eos": True, "model": model,
    })  # fmt: skip
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            raise HaloError(f"{what}: HTTP {response.status} for a completion")
        stamps = []
        for line in response:
            if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
                stamps.append(time.perf_counter())
    except OSError as err:
        raise HaloError(f"{what}: the completion failed: {err}") from None
    finally:
        conn.close()
    if len(stamps) < max(2, tokens // 2):
        raise HaloError(f"{what}: only {len(stamps)} of {tokens} tokens streamed")
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1)


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
