"""The temporary bridge to the modules that still put exec_prefix by hand: their argv reaches
the node with the prefix once (not twice), node code still sent, and gather gets clients back
from whatever Lifecycle hands it."""

from __future__ import annotations

from pathlib import Path

from halo_cluster.client.bridge import HandPrefixed, as_clients, hand_prefixed
from halo_cluster.client.node import clients_from, node_client
from halo_cluster.config import Config, NodeConfig
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.quote import node_script
from halo_cluster.runner.result import Result

BOX = ("toolbox", "run", "-c", "vllm", "--")
INSTALLED = NodeConfig("n1", "root@10.0.0.1", "10.1.0.1", exec_prefix=BOX, halo="/opt/halo")
BARE = NodeConfig("n2", "root@10.0.0.2", "10.1.0.2", exec_prefix=BOX)
OK = Result((), 0, "", "")


def test_a_hand_made_prefix_is_applied_once() -> None:
    fake = FakeRunner().on([], OK)
    runner = HandPrefixed(node_client(INSTALLED, fake))
    runner.run([*BOX, "bash", "-s"], stdin="exec ray stop\n", timeout=60)
    runner.run([*BOX, "pgrep", "-f", "raylet"], timeout=15)
    runner.run(["ping", "-c", "1", "10.1.0.2"])  # none is sent today: the host, as before
    assert fake.calls == [
        (*BOX, "bash", "-s"),
        (*BOX, "pgrep", "-f", "raylet"),
        ("ping", "-c", "1", "10.1.0.2"),
    ]
    assert fake.stdins == ["exec ray stop\n", None, None]


def test_the_node_code_is_still_checked_before_a_script_that_calls_it() -> None:
    fake = FakeRunner().on([], OK)
    client = node_client(BARE, fake)
    script = node_script({}, client.command("ray-nodes"))
    HandPrefixed(client).run([*BOX, "bash", "-s"], stdin=script)
    assert client.code is not None
    assert fake.calls == [(*BOX, *client.code.argv("python3", [])), (*BOX, "bash", "-s")]


def test_gather_gets_clients_back(tmp_path: Path) -> None:
    config = Config(tmp_path / "halo.toml", "c", "auto", (INSTALLED, BARE))
    clients = clients_from(config, {"n1": FakeRunner(), "n2": FakeRunner()})
    assert as_clients(config, clients) == clients
    assert as_clients(config, hand_prefixed(clients)) == clients
    plain = FakeRunner()
    made = as_clients(config, {"n1": plain})
    assert list(made) == ["n1"] and made["n1"].host_runner is plain
    assert made["n1"].runner.run(["true"]) is not None and plain.calls == [(*BOX, "true")]
