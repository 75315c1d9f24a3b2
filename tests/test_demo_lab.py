"""halo demo, whole, as make demo runs it: every capability on a local lab, with both real
engines (vLLM's CPU build and llama.cpp) as root: its own labs, the 3-node mesh, tune, run,
bench and the report, all in one process a user starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine


def halo(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "halo_cluster", *args],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd,
    )  # fmt: skip


def test_demo_prints_both_inventories(
    tmp_path: Path, lab_host: None, vllm_engine: str, llama_cpp: str
) -> None:
    result = halo("demo", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr
    assert (
        "Inventory of this machine" in result.stdout
        and "bundled Strix Halo + E810 node" in result.stdout
    )
    assert "rocep194s0" in result.stdout
    assert "export NCCL_IB_HCA==rocep194s0:1" in result.stdout
    assert (
        "checks that pass on strix-e810 fail or warn on strix-e810-misconfigured" in result.stdout
    )
    assert (
        "PASS rccl-roce-2rank.log" in result.stdout
        and "FAIL nccl-socket-fallback.log" in result.stdout
    )
    assert "strix-e810: 7 of 7 steps done" in result.stdout
    assert "162 all-reduces per token" in result.stdout
    assert "halo up: Ray on node1, node2" in result.stdout
    # the real engine, never the stand-in
    assert "halo serve (vLLM ray executor, TP=2): ready in" in result.stdout
    assert "transport proven: socket" in result.stdout and "stand-in" not in result.stdout
    assert "vLLM's own log: backend gloo, rendezvous tcp://198.19." in result.stdout
    assert "rank 1 on node2 (198.19." in result.stdout
    assert "counters per generated token on node2: fabric (enp194s0np0)" in result.stdout
    assert "halo bench serve, concurrency 4:" in result.stdout
    # halo tune over llama.cpp's layouts, then halo run of the winner, then again
    assert "halo tune: llama.cpp single: " in result.stdout
    assert "halo tune: llama.cpp RPC2: " in result.stdout and "tokens same" in result.stdout
    assert "halo run: llama.cpp " in result.stdout
    assert "halo run again: already serving" in result.stdout
    assert "halo top --once" in result.stdout and "probe node2      fabric" in result.stdout
    assert "halo bench net: mgmt" in result.stdout and "(sockperf)" in result.stdout
    assert "halo bench collective (gloo, 2 ranks, socket)" in result.stdout
    assert "halo bench tp llama-3.1-8b" in result.stdout
    report = tmp_path / "halo-demo-report.html"
    assert f"halo report: wrote {report}" in result.stdout
    assert report.read_text().count('data-chart="') == 5
    # without a switch: a 3-node mesh set up, checked and served over its identities
    assert "halo setup --apply on node1: fabric_links, fabric_identity, fabric_routes" in (
        result.stdout
    )
    assert "OK   fabric.reach: all 6 paths between identities" in result.stdout
    assert "node1 reaches node3" in result.stdout and "over thunderbolt1, 1 hop" in result.stdout
    assert "RPC workers at 198.19." in result.stdout and "proven socket" in result.stdout
    assert "mesh lab removed" in result.stdout
    # a team's endpoint: two deployments (llama.cpp with two replicas, vLLM) behind the gateway
    assert "halo run --name small: llama.cpp single, replica 1 on node2" in result.stdout
    assert "halo run --name chat: vllm TP1, replica 0 on node3" in result.stdout
    assert "vllm-router holding 3 replicas of chat, small" in result.stdout
    for model in ("small", "fast", "chat"):
        assert f"through the gateway, model '{model}' with the key: 200" in result.stdout
    assert "the same without a key: 401" in result.stdout
    answered = result.stdout.split("replica on node2 killed: ", 1)[1].split(" of 20 ", 1)[0]
    assert int(answered) >= 19  # the router retries on the other replica: at most one fails
    assert "deployment small serving on both replicas again after" in result.stdout
    assert "team lab removed" in result.stdout
