"""NodeClient over a FakeRunner: commands inside exec_prefix (added once, by the client),
scripts on stdin, secrets in the script and never in argv, host commands outside the prefix,
halo's node code sent when missing, and call_json's failures as one line naming the node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from halo_cluster.client.node import NodeClient, clients_from, node_client, ssh_clients
from halo_cluster.config import Config, NodeConfig
from halo_cluster.errors import NodeCallError
from halo_cluster.nodecode import MISSING
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.node_code import NodeRunner
from halo_cluster.runner.prefix import PrefixRunner
from halo_cluster.runner.result import Result
from halo_cluster.runner.ssh import SSHRunner

BOX = ("toolbox", "run", "-c", "vllm", "--")
INSTALLED = NodeConfig("n1", "root@10.0.0.1", "10.1.0.1", exec_prefix=BOX, halo="/opt/halo")
BARE = NodeConfig("n2", "root@10.0.0.2", "10.1.0.2", exec_prefix=BOX, python="python3.11")
OK = Result((), 0, "", "")


def client(node: NodeConfig = INSTALLED, fake: FakeRunner | None = None) -> NodeClient:
    return node_client(node, fake if fake is not None else FakeRunner().on([], OK))


def test_run_and_script_go_inside_the_prefix_once() -> None:
    fake = FakeRunner().on([], OK)
    node = client(fake=fake)
    node.run(["pgrep", "-f", "raylet"], timeout=15)
    node.script("echo hi\n")
    assert fake.calls == [(*BOX, "pgrep", "-f", "raylet"), (*BOX, "bash", "-s")]
    assert fake.stdins == [None, "echo hi\n"]


def test_host_commands_skip_the_prefix() -> None:
    fake = FakeRunner().on([], OK)
    node = client(BARE, fake)
    assert node.host_runner is fake
    node.host_runner.run(["ping", "-c", "1", "10.1.0.1"])
    node.host_script("systemctl daemon-reload\n")
    assert fake.calls == [("ping", "-c", "1", "10.1.0.1"), ("bash", "-s")]
    assert fake.stdins == [None, "systemctl daemon-reload\n"]


def test_command_is_the_installed_halo_or_the_node_code() -> None:
    assert client().command("inventory", "--json") == ["/opt/halo", "inventory", "--json"]
    bare = client(BARE)
    assert bare.code is not None and isinstance(bare.runner, NodeRunner)
    assert bare.command("counters") == bare.code.argv("python3.11", ["counters"])
    assert client().code is None and isinstance(client().runner, PrefixRunner)
    with pytest.raises(ValueError, match="n2: no halo configured"):
        NodeClient(BARE, FakeRunner()).command("counters")


def test_call_with_env_keeps_the_secret_out_of_argv() -> None:
    fake = FakeRunner().on([], OK)
    node = client(fake=fake)
    node.call("serve-health", "--port", "8000", env={"HALO_SERVE_KEY": "s3cr3t 'k'"})
    node.call("counters")
    assert fake.calls == [(*BOX, "bash", "-s"), (*BOX, "/opt/halo", "counters")]
    assert all("s3cr3t" not in word for call in fake.calls for word in call)
    script = fake.stdins[0] or ""
    assert "export HALO_SERVE_KEY='s3cr3t '\"'\"'k'\"'\"''\n" in script
    assert script.endswith("exec /opt/halo serve-health --port 8000\n")


def test_the_node_code_is_sent_inside_the_prefix_when_missing() -> None:
    state = {"cached": False}

    def answer(argv: tuple[str, ...]) -> Result:
        if argv[-1] == "--install":
            state["cached"] = True
            return OK
        if not state["cached"]:
            return Result(argv, MISSING, "", "halo-node: halo's node code abc is not cached here")
        return Result(argv, 0, '{"halo": "x"}', "")

    fake = FakeRunner().on([*BOX, "halo"], answer)  # the node code, as FakeRunner names it
    bare = client(BARE, fake)
    assert bare.call_json("node-info") == {"halo": "x"} and bare.sent
    assert [call[: len(BOX) + 1] for call in fake.calls] == [(*BOX, "python3.11")] * 3
    assert bare.code is not None
    assert fake.calls[1][-1] == "--install" and fake.stdins[1] == bare.code.payload()


def test_a_script_calling_the_node_code_is_preceded_by_one_check() -> None:
    fake = FakeRunner().on([], OK)
    bare = client(BARE, fake)
    bare.call("ray-nodes", env={"HALO_RAY_TOKEN": "t"})
    bare.call("ray-nodes", env={"HALO_RAY_TOKEN": "t"})
    assert bare.code is not None
    assert fake.calls == [(*BOX, *bare.code.argv("python3.11", [])), *[(*BOX, "bash", "-s")] * 2]
    assert not bare.sent  # it was cached there already


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            Result((), 255, "", "ssh: connect to host 10.0.0.1 port 22: No route to host\n"),
            "n1: ray-nodes failed: ssh: connect to host 10.0.0.1 port 22: No route to host",
        ),
        (
            Result((), 1, "", "Traceback…\nRuntimeError: GCS \x1b[31mdown\x1b[0m\n"),
            r"n1: ray-nodes failed: RuntimeError: GCS \x1b[31mdown\x1b[0m",
        ),
        (
            Result((), 0, "not json \x1b[31m\n" * 3, ""),
            "n1: unreadable ray-nodes output from /opt/halo (Expecting value: line 1 column 1 "
            r"(char 0); got 'not json \x1b[31m\nnot json \x1b[31m\nnot json \x1b[31m\n')",
        ),
    ],
)
def test_call_json_failures_are_one_line(answer: Result, message: str) -> None:
    node = client(fake=FakeRunner().on([*BOX, "/opt/halo", "ray-nodes"], answer))
    with pytest.raises(NodeCallError) as raised:
        node.call_json("ray-nodes")
    assert str(raised.value) == message


def test_call_json_survives_deep_nesting() -> None:
    deep = Result((), 0, "[" * 50_000, "")
    node = client(fake=FakeRunner().on([], deep))
    with pytest.raises(
        NodeCallError, match=r"^n1: unreadable inventory output .*got '\[\[\["
    ) as err:
        node.call_json("inventory")
    assert "\n" not in str(err.value) and len(str(err.value)) < 400
    ok = client(fake=FakeRunner().on([], Result((), 0, json.dumps([{"a": 1}]), "")))
    assert ok.call_json("inventory", env={"X": "1"}) == [{"a": 1}]


def test_clients_of_a_config(tmp_path: Path) -> None:
    config = Config(tmp_path / "halo.toml", "c", "auto", (INSTALLED, BARE), tmp_path / "ssh")
    over_ssh = ssh_clients(config)
    assert list(over_ssh) == ["n1", "n2"] and over_ssh["n2"].name == "n2"
    ssh = over_ssh["n2"].host_runner
    assert isinstance(ssh, SSHRunner) and (ssh.target, ssh.ssh_config) == (
        "root@10.0.0.2",
        tmp_path / "ssh",
    )
    fakes = {"n1": FakeRunner(), "n2": FakeRunner()}
    given = clients_from(config, fakes)
    assert [given[n].host_runner for n in ("n1", "n2")] == [fakes["n1"], fakes["n2"]]
    assert given["n1"].node is INSTALLED and given["n2"].code is not None
