"""halo serve in the lab: the stand-in OpenAI server started through Ray's head, its NCCL log
verdict, the refusal on a transport mismatch, and secrets kept out of argv, logs and state."""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from pathlib import Path

import pytest

from halo_cluster.examples import EXAMPLES
from tests.conftest import HALO, free_port, halo, require

pytestmark = pytest.mark.lab
STANDIN = EXAMPLES / "standin_vllm.py"
SECRET = "s3cr3t-key-never-in-argv"


def test_serve_verdict_refusal_and_secrets(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "halo lab needs root")
    require(
        shutil.which("ray", path=str(Path(HALO).parent)) is not None,
        "ray is not installed in this venv",
    )
    assert halo("lab", "up", "--name", "sv", cwd=tmp_path).returncode == 0
    lab = tmp_path / ".halo-lab" / "sv"
    config = lab / "halo.toml"
    standin = f"python3 {STANDIN}"  # halo's own installation is visible inside the nodes
    status = json.loads(halo("lab", "status", "--name", "sv", "--json", cwd=tmp_path).stdout)
    head_mgmt, port = status["nodes"][0]["mgmt_address"], free_port()
    with config.open("a") as handle:
        handle.write(
            f'\n[serve]\nmodel = "standin-8b"\ncommand = "{standin}"\nhost = "{head_mgmt}"\nport = {port}\n'
            'api_key_env = "HALO_TEST_KEY"\n'
        )
    env = {"HALO_TEST_KEY": SECRET}
    try:
        up = halo("up", "--config", str(config), cwd=tmp_path)
        assert up.returncode == 0, up.stderr
        served = halo(
            "serve", "--config", str(config), "--json", "--wait", "60", cwd=tmp_path, env=env
        )
        assert served.returncode == 0, served.stderr
        result = json.loads(served.stdout)
        assert result["verdict"]["transport"] == "socket" and result["expected"] == "socket"
        assert result["verdict"]["ranks_seen"] == 2 and not result["stopped"]
        request = urllib.request.Request(
            f"{result['url']}/v1/models", headers={"Authorization": f"Bearer {SECRET}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.load(response)["data"][0]["id"] == "standin-8b"
        # the secret is in none of: our output, the state file, the server's argv, its log
        assert SECRET not in served.stdout + served.stderr
        assert all(SECRET not in p.read_text() for p in (lab / ".halo").glob("*.json"))
        argv = halo(
            "lab", "exec", "--name", "sv", "node1", "--", "pgrep", "-af", "standin", cwd=tmp_path
        ).stdout
        assert "standin-8b" in argv and SECRET not in argv
        health = json.loads(
            halo("status", "--config", str(config), "--json", cwd=tmp_path, env=env).stdout
        )["serve"]
        assert health["healthy"] and "standin-8b" in health["detail"]
        load = halo(
            "bench",
            "serve",
            "--config",
            str(config),
            "--concurrency",
            "1,2",
            "--prompts",
            "4",
            "--output-len",
            "4",
            "--out",
            str(tmp_path / "serve.json"),
            "--json",
            cwd=tmp_path,
            env=env,
        )
        assert load.returncode == 0, load.stderr
        bench = json.loads(load.stdout)
        assert [lv["errors"] for lv in bench["levels"]] == [0, 0] and bench["levels"][0][
            "output_tokens"
        ] == 16
        assert {n: p["transport"] for n, p in bench["plans"].items()} == {
            "node1": "ethernet",
            "node2": "ethernet",
        }
        logs = halo("logs", "--config", str(config), cwd=tmp_path).stdout
        assert "Using network Socket" in logs and SECRET not in logs
        assert "server stopped" in halo("stop", "--config", str(config), cwd=tmp_path).stdout
        # the log shows another transport than the plan asked for: refused and stopped
        with config.open("a") as handle:
            handle.write('extra_args = ["--standin-transport", "roce"]\n')
        refused = halo(
            "serve", "--config", str(config), "--json", "--wait", "60", cwd=tmp_path, env=env
        )
        assert refused.returncode == 1
        data = json.loads(refused.stdout)
        assert data["stopped"] and data["verdict"]["transport"] == "roce"
        assert "no server was running" in halo("stop", "--config", str(config), cwd=tmp_path).stdout
        # 0.0.0.0 without a key is refused before anything starts
        exposed = halo(
            "serve",
            "--config",
            str(config),
            "--host",
            "0.0.0.0",
            cwd=tmp_path,
            env={"HALO_TEST_KEY": ""},
        )
        assert exposed.returncode == 2
    finally:
        halo("down", "--config", str(config), cwd=tmp_path)
        halo("lab", "down", "--name", "sv", cwd=tmp_path)
