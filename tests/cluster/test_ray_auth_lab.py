"""Ray's token authentication in the lab, for real: halo up makes a token; a client on
another node without it is refused, with it admitted; the token is in no process's argv."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import halo

pytestmark = pytest.mark.lab
CLIENT = (
    "import ray, sys\n"
    "try:\n"
    "    ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
    "except Exception as err:\n"
    "    print('REFUSED', type(err).__name__, str(err)[:300]); sys.exit(3)\n"
    "print('ADMITTED', int(ray.cluster_resources().get('CPU', 0)))\n"
)


def test_a_client_without_the_token_is_refused(tmp_path: Path, lab_host: None) -> None:
    lab = tmp_path / "A"
    config = lab / "halo.toml"
    # no engine: Ray from the halo installed on the nodes
    up = ("lab", "up", "--name", "au", "--dir", str(lab), "--no-engine", "--installed")
    assert halo(*up).returncode == 0
    try:
        assert halo("up", "--config", str(config), cwd=tmp_path).returncode == 0
        token = (lab / ".halo" / "lab-au.ray-token").read_text().strip()
        head = halo("lab", "status", "--dir", str(lab), "--json").stdout
        address = head.split('"fabric_address": "', 1)[1].split('"', 1)[0] + ":6379"
        client = [sys.executable, "-c", CLIENT, address]

        def run_on_node2(*env: str) -> str:
            argv = ["lab", "exec", "--dir", str(lab), "node2", "--", "env", *env, *client]
            done = halo(*argv, timeout=120)
            return done.stdout + done.stderr

        refused = run_on_node2()
        assert "REFUSED" in refused and "ADMITTED" not in refused
        wrong = run_on_node2("RAY_AUTH_MODE=token", "RAY_AUTH_TOKEN=" + "0" * 64)
        assert "REFUSED" in wrong and "ADMITTED" not in wrong
        admitted = run_on_node2("RAY_AUTH_MODE=token", f"RAY_AUTH_TOKEN={token}")
        assert "ADMITTED" in admitted, admitted
        status = halo("status", "--config", str(config), cwd=tmp_path)
        assert status.returncode == 0, status.stderr  # halo's own clients carry the token
        for node in ("node1", "node2"):
            argv = ["lab", "exec", "--dir", str(lab), node, "--", "ps", "-eo", "args"]
            assert token not in halo(*argv).stdout
    finally:
        halo("down", "--config", str(config), cwd=tmp_path)
        halo("lab", "down", "--name", "au", "--dir", str(lab))
