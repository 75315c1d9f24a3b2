"""A third engine through the same bring-up, in the lab: the test-only relay engine
(relay_engine.py, one module) registered with one line, configured by its own
[serve.relay] table, served on bare lab nodes where 'halo up' never ran. halo makes the
plans from the nodes' facts, starts the engine, waits for /health, warms it up, proves it
by the engine's own words and by the counters (bytes per token on the fabric, not on
management), shows it in status, names a worker that dies, and stops it everywhere."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from halo_cluster import engine_registry
from halo_cluster.cluster.handle import Cluster
from halo_cluster.config import load_config
from halo_cluster.engines.request import serve_request
from halo_cluster.serving.bringup import Serving
from halo_cluster.serving.status import cluster_status
from tests.conftest import halo

pytestmark = pytest.mark.lab
HERE = Path(__file__).parent


@pytest.fixture
def relay() -> Iterator[None]:
    engine_registry.register("relay", "tests.engines.relay_engine")
    try:
        yield
    finally:
        engine_registry.unregister("relay")


def _node(lab: Path, node: str, script: str) -> str:
    done = halo("lab", "exec", "--dir", str(lab), node, "--", "bash", "-c", script)
    return done.stdout


def test_a_third_engine_is_served_and_proven_without_ray(
    tmp_path: Path, relay: None, lab_host: None
) -> None:
    lab = tmp_path / "R"
    up = halo("lab", "up", "--name", "relay", "--dir", str(lab), "--no-engine", "--no-llama-cpp")
    assert up.returncode == 0, up.stderr
    config_path = lab / "halo.toml"
    try:
        script = lab / "relay_server.py"  # the lab directory is seen by every node
        shutil.copy(HERE / "relay_server.py", script)
        with config_path.open("a") as handle:
            handle.write(f'\n[serve]\nengine = "relay"\n\n[serve.relay]\nscript = "{script}"\n')
        config = load_config(config_path)
        said: list[str] = []
        serving = Serving(Cluster.over_ssh(config, said.append))
        result = serving.start(serve_request(config, model="relay-test", wait_s=60))
        assert (result.proven, result.problems, result.stopped) == ("socket", [], False)
        assert result.executor == "relay" and result.tp is None
        fabric = {n.name: n.fabric_address for n in config.nodes}
        assert result.engine == {"engine": "relay", "links": [f"{fabric['node2']}:50100"]}
        assert result.ranks == [{"rank": 0, "node": "node2", "address": f"{fabric['node2']}:50100"}]
        for node in ("node1", "node2"):
            paths = result.traffic["nodes"][node]
            # 4 KiB each way per token on the fabric, next to nothing on management
            assert paths["fabric"]["bytes_per_token"] > 8192 > paths["mgmt"]["bytes_per_token"]
        assert "gathering facts and checking every node" in said  # plans without Ray
        # no Ray, so no Ray token: the state directory and the engine's log are private all
        # the same (issue 29: 0755 and 0644 with [ray] auth = "none")
        state = 'cd "${XDG_STATE_HOME:-$HOME/.local/state}/halo" && stat -c %a . serve-*.log'
        for node in ("node1", "node2"):
            assert _node(lab, node, state).split() == ["700", "600"], node
        status = cluster_status(Cluster.over_ssh(config))
        assert status["serve"]["healthy"] and status["serve"]["engine"] == "relay"
        assert not any(n["ray"] for n in status["nodes"])
        shown = halo("status", "--config", str(config_path))  # another halo: no 'relay'
        assert shown.returncode == 2 and "unknown table [serve.relay]" in shown.stderr
        _node(lab, "node2", "pkill -f 'relay_server.py worker'")
        lost = cluster_status(Cluster.over_ssh(config))
        assert not lost["serve"]["healthy"] and lost["serve"]["lost"] == ["node2"]
        assert serving.stop()
        for node in ("node1", "node2"):
            left = _node(lab, node, "pgrep -af relay_server.py | grep -v pgrep; echo clean")
            assert left.strip() == "clean", node
    finally:
        Serving(Cluster.over_ssh(load_config(config_path))).stop()
        halo("lab", "down", "--name", "relay", "--dir", str(lab))
