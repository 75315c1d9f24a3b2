"""halo model in the lab, for real: nodes with their own stores (invisible to each other),
fabric links limited by tbf, the chain over the fabric addresses. A first sync, a no-op
second one, one changed file (only it crosses the fabric), a corrupted file on one node
(verify names it, sync repairs only it), Ctrl-C mid-sync (partials kept, nothing left
running, the next sync resumes), a node killed mid-sync (the others finish; it resumes
once booted), a node as the source, a store that fills, and serving a model by its name
from the stores with the real llama.cpp."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import HALO, halo
from tests.models_once import TinyModels

MIB = 1 << 20
LEFT = "pgrep -fc 'model-[p]ipe' || true"  # the bracket keeps this shell out of the match


def _lab(tmp: Path, name: str, *extra: str) -> tuple[Path, str]:
    lab = tmp / name
    up = halo("lab", "up", "--name", name, "--dir", str(lab), "--nodes", "3", "--no-engine", *extra)
    assert up.returncode == 0, up.stderr
    return lab, str(lab / "halo.toml")


def _down(tmp: Path, lab: Path) -> None:
    halo("lab", "down", "--dir", str(lab), cwd=tmp)


def _sync(config: str, source: str, *extra: str, env: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    done = halo("model", "sync", source, "--config", config, "--json", *extra, env=env)
    assert done.stdout, done.stderr
    data: dict = json.loads(done.stdout)  # type: ignore[type-arg]
    data["exit"] = done.returncode
    return data


def _statuses(data: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {node: row["status"] for node, row in data["nodes"].items()}


def _exec(lab: Path, node: str, script: str) -> str:
    return halo("lab", "exec", "--dir", str(lab), node, "--", "bash", "-c", script).stdout


def _fabric_rx(lab: Path, node: str) -> int:
    return int(_exec(lab, node, "cat /sys/class/net/enp194s0np0/statistics/rx_bytes") or 0)


def _partial(lab: Path, node: str, name: str, rel: str) -> Path:
    return lab / "stores" / node / name / ".halo" / "partial" / rel


def _act_when(
    args: list[str], check: Callable[[], bool], act: Callable[[subprocess.Popen[str]], object]
) -> tuple[int, str, str]:
    """Start halo in its own session, ``act`` once ``check()`` holds (an observable state,
    never a fixed wait), and return (exit code, stdout, stderr)."""
    proc = subprocess.Popen(
        [HALO, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not check():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the state never came"
        time.sleep(0.05)
    act(proc)
    out, err = proc.communicate(timeout=180)
    return proc.returncode, out, err


def _nothing_left(lab: Path) -> None:
    """No hop of a transfer on any node (they end as soon as their stream breaks)."""
    deadline = time.monotonic() + 60
    while any(_exec(lab, n, LEFT).strip() not in ("", "0") for n in ("node1", "node2", "node3")):
        assert time.monotonic() < deadline, "a model-pipe is still running"
        time.sleep(0.5)


@pytest.mark.lab
def test_sync_resume_repair_and_faults_over_a_100mbit_fabric(
    tmp_path: Path, lab_host: None
) -> None:
    lab, config = _lab(tmp_path, "msync", "--fabric-rate", "100mbit")
    try:
        src = tmp_path / "src"
        (src / "w").mkdir(parents=True)
        (src / "config.json").write_text('{"layers": 2}')
        (src / "w" / "a.bin").write_bytes(os.urandom(24 * MIB))
        (src / "w" / "b.bin").write_bytes(os.urandom(8 * MIB))
        size = 32 * MIB + len('{"layers": 2}')

        # the stores are private: the host's tree of them is hidden inside every node
        assert _exec(lab, "node2", f"ls -A {lab / 'stores'}").strip() == ""

        first = _sync(config, str(src), "--name", "m")
        assert first["exit"] == 0 and _statuses(first) == dict.fromkeys(
            ("node1", "node2", "node3"), "synced"
        )
        assert all(row["written"] == size and row["files"] == 3 for row in first["nodes"].values())
        assert first["sent"] == size  # the source read once for three nodes
        assert first["mb_s"] > 0 and first["cpu_s_per_gb"]["controller"] > 0
        assert all(row["mb_s"] > 0 and row["cpu_s_per_gb"] > 0 for row in first["nodes"].values())
        for node in ("node1", "node2", "node3"):
            held = _exec(lab, node, "sha256sum /var/lib/halo/models/m/w/a.bin | cut -c1-64")
            assert (
                held.strip()
                == __import__("hashlib").sha256((src / "w" / "a.bin").read_bytes()).hexdigest()
            )

        # in sync already: nothing is sent, nothing crosses the fabric (counted, not timed)
        before = _fabric_rx(lab, "node3")
        again = _sync(config, str(src), "--name", "m")
        assert _statuses(again) == dict.fromkeys(("node1", "node2", "node3"), "same")
        assert again["sent"] == 0 and _fabric_rx(lab, "node3") - before < 256 * 1024

        # one file changed: only it crosses the fabric
        (src / "config.json").write_text('{"layers": 3}')
        before = _fabric_rx(lab, "node3")
        changed = _sync(config, str(src), "--name", "m")
        assert _statuses(changed) == dict.fromkeys(("node1", "node2", "node3"), "synced")
        assert all(row["files"] == 1 and row["written"] == 13 for row in changed["nodes"].values())
        assert _fabric_rx(lab, "node3") - before < 256 * 1024

        # a file damaged on node2: verify names it, sync sends only it, to node2 only
        _exec(
            lab,
            "node2",
            "printf XX | dd of=/var/lib/halo/models/m/w/b.bin bs=1 seek=99 conv=notrunc",
        )
        verify = halo("model", "verify", "m", "--config", config)
        assert verify.returncode == 1
        assert "node2: DIFFERS w/b.bin: sha256" in verify.stdout
        assert "node1: 3 file(s) verified" in verify.stdout
        listed = json.loads(halo("model", "ls", "--config", config, "--json").stdout)
        states = {n: v["state"] for n, v in listed["models"][0]["nodes"].items()}
        assert states == {"node1": "same", "node2": "incomplete", "node3": "same"}
        repaired = _sync(config, str(src), "--name", "m")
        assert _statuses(repaired) == {"node1": "same", "node2": "synced", "node3": "same"}
        assert repaired["nodes"]["node2"]["written"] == 8 * MIB

        # Ctrl-C mid-sync: partials kept, nothing left running, the next sync resumes
        (src / "w" / "a.bin").write_bytes(os.urandom(24 * MIB))
        partial = _partial(lab, "node3", "m", "w/a.bin")
        code, _out, err = _act_when(
            ["model", "sync", str(src), "--name", "m", "--config", config],
            lambda: partial.exists() and partial.stat().st_size > MIB,
            lambda proc: os.killpg(proc.pid, signal.SIGINT),
        )
        assert code == 130 and "Traceback" not in err, err
        _nothing_left(lab)
        kept = partial.stat().st_size
        assert MIB < kept < 24 * MIB
        resumed = _sync(config, str(src), "--name", "m")
        assert resumed["exit"] == 0 and resumed["nodes"]["node3"]["status"] == "synced"
        assert resumed["nodes"]["node3"]["resumed"] >= MIB

        # node2 dies mid-sync: node1 and node3 finish (node3 in a second round), node2
        # resumes once it is back
        (src / "w" / "a.bin").write_bytes(os.urandom(24 * MIB))
        partial = _partial(lab, "node2", "m", "w/a.bin")
        code, out, err = _act_when(
            ["model", "sync", str(src), "--name", "m", "--config", config, "--json"],
            lambda: partial.exists() and partial.stat().st_size > MIB,
            lambda _proc: halo("lab", "kill", "--dir", str(lab), "node2"),
        )
        assert code == 1, err
        lost = json.loads(out)
        assert lost["nodes"]["node1"]["status"] == "synced"
        assert lost["nodes"]["node3"]["status"] == "synced", lost
        assert lost["nodes"]["node2"]["status"] in ("failed", "unreachable")
        assert halo("lab", "boot", "--dir", str(lab), "node2").returncode == 0
        back = _sync(config, str(src), "--name", "m")
        assert _statuses(back) == {"node1": "same", "node2": "synced", "node3": "same"}
        assert back["nodes"]["node2"]["resumed"] >= MIB

        # a node as the source: node1's copy to a new name everywhere, node1 included
        from_node = _sync(config, "node1:/var/lib/halo/models/m", "--name", "m2")
        assert from_node["source"] == "node1:/var/lib/halo/models/m"
        assert _statuses(from_node) == dict.fromkeys(("node1", "node2", "node3"), "synced")
        removed = json.loads(halo("model", "rm", "m2", "--config", config, "--json").stdout)
        assert removed == {n: {"removed": True} for n in ("node1", "node2", "node3")}
    finally:
        _down(tmp_path, lab)


@pytest.mark.lab
def test_a_full_store_fails_that_node_alone_and_the_sync_resumes_there(
    tmp_path: Path, lab_host: None
) -> None:
    lab, config = _lab(tmp_path, "mfull", "--store-size", "16m")
    try:
        src = tmp_path / "src"
        src.mkdir()
        (src / "a.bin").write_bytes(os.urandom(12 * MIB))
        _exec(lab, "node2", "head -c 8M /dev/zero > /var/lib/halo/models/junk")
        full = _sync(config, str(src), "--name", "big")
        assert full["exit"] == 1
        assert _statuses(full) == {"node1": "synced", "node2": "failed", "node3": "synced"}
        assert "No space left on device" in full["nodes"]["node2"]["reason"]
        _exec(lab, "node2", "rm /var/lib/halo/models/junk")
        fixed = _sync(config, str(src), "--name", "big")
        assert _statuses(fixed) == {"node1": "same", "node2": "synced", "node3": "same"}
        assert fixed["nodes"]["node2"]["resumed"] > 0
    finally:
        _down(tmp_path, lab)


@pytest.mark.engine
def test_serve_by_name_reads_the_store_and_refuses_a_node_without_it(
    tmp_path: Path, lab_host: None, llama_cpp: str, tiny_models: TinyModels
) -> None:
    lab, config = _lab(tmp_path, "mserve")
    try:
        model = tmp_path / "tiny"
        tiny_models.copy(model, "gguf")
        synced = _sync(config, str(model / "model.gguf"), "--name", "tiny")
        assert synced["exit"] == 0, synced
        served = halo(
            "serve", "tiny", "--engine", "llama.cpp", "--config", config, "--json", timeout=300
        )
        assert served.returncode == 0, served.stderr
        result = json.loads(served.stdout)
        assert (
            result["model"] == "/var/lib/halo/models/tiny/model.gguf"
            and result["proven"] == "socket"
        )
        opened = _exec(
            lab, "node1", "cat /proc/$(pgrep -f llama-server | head -1)/cmdline | tr '\\0' ' '"
        )
        assert "--model /var/lib/halo/models/tiny/model.gguf" in opened
        worker = _exec(
            lab, "node2", "cat /proc/$(pgrep -f ggml-rpc-server | head -1)/cmdline | tr '\\0' ' '"
        )
        assert " -c" in worker  # the worker's tensor cache, in its own store
        assert halo("stop", "--config", config).returncode == 0

        assert halo("model", "rm", "tiny", "--nodes", "node1", "--config", config).returncode == 0
        refused = halo("serve", "tiny", "--engine", "llama.cpp", "--config", config)
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines()[-1] == (
            "halo: error: node1 has no model tiny in /var/lib/halo/models: run "
            f"'halo model sync {model / 'model.gguf'} --name tiny --nodes node1'"
        )
    finally:
        _down(tmp_path, lab)
