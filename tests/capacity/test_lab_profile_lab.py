"""halo lab profile on this machine, for real, with both engines: llama.cpp's llama-bench
alone and with one ggml-rpc-server over loopback; vLLM TP=1, and TP=2 with two node ranks
on this machine (Gloo, shared memory off), both through its own multi-node executor, their
requests taking turns. The profile it writes is one the planner reads (--hardware lab), and
nothing it started is left running."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

from halo_cluster.capacity.profile import hardware_from_profile
from halo_cluster.lab.profile import VLLM_REQUESTS
from tests.conftest import halo
from tests.models_once import TinyModels

pytestmark = pytest.mark.engine

LEFTOVER = re.compile(rb"vllm serve|VLLM::|ggml-rpc-server|llama-bench")


def leftovers() -> list[str]:
    """The engines' processes on this host's own network: the profile runs here, while a lab
    test beside it (a parallel run) serves from its nodes' namespaces."""
    own = os.readlink("/proc/self/ns/net")
    found = []
    for entry in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes()
            if os.readlink(f"/proc/{entry}/ns/net") == own and LEFTOVER.search(argv):
                found.append(argv.replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # gone, or not a process
            continue
    return found


def test_the_profile_measures_both_engines_and_the_planner_reads_it(
    tmp_path: Path, vllm_engine: str, llama_cpp: str, tiny_models: TinyModels
) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    done = halo("lab", "profile", "--json", cwd=tmp_path, env=env, timeout=1500)
    assert done.returncode == 0, done.stderr[-2000:]
    document = json.loads(done.stdout)
    written = json.loads((tmp_path / "data" / "halo" / "hardware" / "lab.json").read_text())
    assert written == document
    vllm = document["measurements"]["vllm"]
    assert set(vllm) == {
        "model", "tokens_per_s", "tp2_tokens_per_s", "read_bytes", "bare_allreduce_us",
        "per_collective_us", "shared_core_allreduce_us", "requests_tokens_per_s",
    }  # fmt: skip
    for key in ("tokens_per_s", "tp2_tokens_per_s"):
        assert math.isfinite(vllm[key]) and vllm[key] > 0, key
    # both layouts' requests, taken in turns, each one's own rate
    assert set(vllm["requests_tokens_per_s"]) == {"1", "2"}
    for found in vllm["requests_tokens_per_s"].values():
        assert len(found) == VLLM_REQUESTS and all(math.isfinite(v) and v > 0 for v in found)
    assert set(vllm["bare_allreduce_us"]) == set(vllm["shared_core_allreduce_us"]) == {
        "2", "4", "8"
    }  # fmt: skip
    for ranks, us in vllm["bare_allreduce_us"].items():
        assert math.isfinite(us) and us >= vllm["shared_core_allreduce_us"][ranks] >= 0
    assert document["engines"]["vllm"]["per_collective_us"] == vllm["per_collective_us"] >= 0
    waits = document["engines"]["vllm"]["shared_core_allreduce_us"]
    assert waits == vllm["shared_core_allreduce_us"]
    assert "TP=2 over its multi-node executor" in document["engines"]["vllm"]["source"]
    assert set(document["engines"]) == {"llama.cpp", "vllm"}
    hardware = hardware_from_profile(document, "lab.json")
    assert hardware.shared_cores >= 2 and hardware.cpu_only
    model = tmp_path / "model"
    tiny_models.copy(model, "both")
    plan = halo("plan", "--hf-config", str(model / "config.json"), "--engine", "vllm",
                "--hardware", "lab", "--link", "lab", "--nodes", "2", "--json",
                cwd=tmp_path, env=env)  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    rows = {row["layout"]: row for row in json.loads(plan.stdout)["rows"]}
    assert rows["TP2"]["decode_ms_network"] > 0 and rows["TP2"]["tokens_per_s"] > 0
    assert leftovers() == []
