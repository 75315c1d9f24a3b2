"""halo up / status / down for real: Ray from PyPI on lab nodes, CPU only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import HALO, halo, require

pytestmark = pytest.mark.lab


def ray_processes(cwd: Path, name: str, node: str) -> str:
    return halo(
        "lab", "exec", "--name", name, node, "--", "pgrep", "-fa", "raylet|gcs_server", cwd=cwd
    ).stdout


def test_up_status_kill_heal_down(tmp_path: Path, lab_host: None) -> None:
    require(
        shutil.which("ray", path=str(Path(HALO).parent)) is not None,
        "ray is not installed in this venv",
    )
    assert halo("lab", "up", "--name", "rl", "--nodes", "3", cwd=tmp_path).returncode == 0
    config = str(tmp_path / ".halo-lab" / "rl" / "halo.toml")
    try:
        up = halo("up", "--config", config, "--json", cwd=tmp_path)
        assert up.returncode == 0, up.stderr
        data = json.loads(up.stdout)
        assert data["started"] == ["node1", "node2", "node3"]
        plans = data["plans"]
        assert {p["address"] for p in plans.values()} == {
            "198.19.1.11",
            "198.19.1.12",
            "198.19.1.13",
        } or len({p["address"] for p in plans.values()}) == 3
        assert all(
            p["transport"] == "ethernet" and p["socket_ifname"] == "enp194s0np0"
            for p in plans.values()
        )
        status = json.loads(halo("status", "--config", config, "--json", cwd=tmp_path).stdout)
        assert [(n["name"], n["ray"], n["transport"]) for n in status["nodes"]] == [
            ("node1", True, "ethernet"),
            ("node2", True, "ethernet"),
            ("node3", True, "ethernet"),
        ]
        environ = halo(
            "lab",
            "exec",
            "--name",
            "rl",
            "node2",
            "--",
            "bash",
            "-c",
            'tr "\\0" "\\n" < /proc/$(pgrep -f raylet | head -1)/environ',
            cwd=tmp_path,
        ).stdout
        assert (
            f"VLLM_HOST_IP={plans['node2']['address']}" in environ
            and "GLOO_SOCKET_IFNAME=enp194s0np0" in environ
        )
        # a crashed worker is reported, then booted again and rejoined by up
        assert halo("lab", "kill", "--name", "rl", "node2", cwd=tmp_path).returncode == 0
        missing = halo("status", "--config", config, "--json", cwd=tmp_path)
        assert missing.returncode == 1
        assert [n["ray"] for n in json.loads(missing.stdout)["nodes"]] == [True, False, True]
        assert halo("lab", "heal", "--name", "rl", "node2", cwd=tmp_path).returncode == 0
        again = json.loads(halo("up", "--config", config, "--json", cwd=tmp_path).stdout)
        assert again["started"] == ["node2"] and again["already"] == ["node1", "node3"]
        # an unreachable node during down is reported; the others are still stopped
        assert (
            halo("lab", "cut", "--name", "rl", "--net", "mgmt", "node3", cwd=tmp_path).returncode
            == 0
        )
        down = halo("down", "--config", config, "--json", cwd=tmp_path)
        assert down.returncode == 1
        outcome = json.loads(down.stdout)
        assert outcome["node1"] == outcome["node2"] == "stopped" and outcome["node3"].startswith(
            "failed"
        )
        assert (
            ray_processes(tmp_path, "rl", "node1") == ""
            and ray_processes(tmp_path, "rl", "node2") == ""
        )
        assert (
            halo("lab", "heal", "--name", "rl", "--net", "mgmt", "node3", cwd=tmp_path).returncode
            == 0
        )
        assert halo("down", "--config", config, cwd=tmp_path).returncode == 0
        assert ray_processes(tmp_path, "rl", "node3") == ""
    finally:
        halo("lab", "down", "--name", "rl", cwd=tmp_path)
