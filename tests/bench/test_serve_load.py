"""halo bench serve for real over HTTP against the stand-in server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from halo_cluster.examples import EXAMPLES
from tests.conftest import free_port

STANDIN = EXAMPLES / "standin_vllm.py"
HALO = str(Path(sys.executable).parent / "halo")


@pytest.fixture
def standin() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(STANDIN),
            "serve",
            "standin-8b",
            "--port",
            str(port),
            "--standin-token-delay",
            "0.01",
        ],
        env={**os.environ, "VLLM_API_KEY": "bench-key"},
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(f"{url}/health", timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_bench_serve_measures_each_level(standin: str, tmp_path: Path) -> None:
    out = tmp_path / "serve.json"
    result = subprocess.run(
        [
            HALO,
            "bench",
            "serve",
            "--url",
            standin,
            "--concurrency",
            "1,4",
            "--prompts",
            "8",
            "--output-len",
            "6",
            "--input-len",
            "4",
            "--api-key-env",
            "BENCH_KEY",
            "--out",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "BENCH_KEY": "bench-key"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == "halo.bench.serve/1" and data["model"] == "standin-8b"
    assert json.loads(out.read_text())["levels"] == data["levels"]
    one, four = data["levels"]
    assert (one["concurrency"], one["requests"], one["errors"], one["output_tokens"]) == (
        1,
        8,
        0,
        48,
    )
    assert 5 <= one["itl_ms"]["p50"] <= 60  # the stand-in emits a token every 10 ms
    assert one["ttft_ms"]["p50"] > 0 and one["e2e_ms"]["p99"] >= one["e2e_ms"]["p50"]
    assert (
        four["output_tokens_per_s"] > one["output_tokens_per_s"]
    )  # concurrency helps a latency-bound server
    assert "bench-key" not in result.stdout


def test_wrong_key_is_counted_as_errors(standin: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            HALO,
            "bench",
            "serve",
            "--url",
            standin,
            "--model",
            "standin-8b",
            "--concurrency",
            "2",
            "--prompts",
            "3",
            "--out",
            str(tmp_path / "x.json"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    level = json.loads(result.stdout)["levels"][0]
    assert level["errors"] == 3 and level["first_error"].startswith("HTTP 401")
