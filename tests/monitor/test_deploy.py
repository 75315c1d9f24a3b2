"""Installing the exporter units: on each node's host (systemd is the machine's, not its
container's: no exec_prefix), all nodes at once, one node's failure its own."""

from __future__ import annotations

from pathlib import Path

from halo_cluster.client.node import clients_from
from halo_cluster.config import Config, NodeConfig
from halo_cluster.monitor.deploy import exporter_units, install_units
from halo_cluster.nodecode import NodeCode
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.result import Result

BOX = ("toolbox", "run", "-c", "vllm", "--")
NODES = (
    NodeConfig("a", "root@a", "10.1.0.1", exec_prefix=BOX, mgmt_address="10.0.0.1"),
    NodeConfig("b", "root@b", "10.1.0.2", exec_prefix=BOX, mgmt_address="10.0.0.2"),
    NodeConfig("c", "root@c", "10.1.0.3", halo="/opt/halo"),
)


def test_units_install_on_the_host_and_each_node_answers_for_itself(tmp_path: Path) -> None:
    config = Config(tmp_path / "halo.toml", "c", "auto", NODES)
    code = NodeCode(b"zipapp")
    runners = {
        "a": FakeRunner().on(["bash", "-s"], Result((), 0, "copied\nstarted\n", "")),
        "b": FakeRunner().on(
            ["bash", "-s"], Result((), 1, "", "sha256sum: WARNING: 1 did NOT match")
        ),
        "c": FakeRunner().on(["bash", "-s"], Result((), 0, "no-systemd\n", "")),
    }
    units = exporter_units(config, config.nodes, code, "mgmt", 9877, "1s")
    outcome = install_units(clients_from(config, runners), units, code)
    assert outcome == {
        "a": {"installed": True, "started": True, "error": None},
        "b": {"installed": False, "started": False, "error": "sha256sum: WARNING: 1 did NOT match"},
        "c": {"installed": True, "started": False, "error": None},
    }
    for name, unit in zip("abc", units, strict=True):
        assert runners[name].calls == [("bash", "-s")]  # no exec_prefix: the host's systemd
        script = runners[name].stdins[0] or ""
        assert code.payload() in script and unit.unit in script
