"""Hardening 4, section 1: ``halo setup`` changes the machines the user meant.

With a cluster config (given or found), setup's machines are the config's nodes, planned and
applied over SSH, each named (hostname, address) before anything changes; ``--local`` is this
machine, which --apply changes without --yes only when it is a node of the config; without a
config it is this machine, said so. The nodes here are FakeRunners answering with a fixture
root's steps, and this machine is never changed: applying here fails the test."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from halo_cluster.client.node import clients_from
from halo_cluster.config import load_config
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.result import Result
from halo_cluster.setup.apply import setup_here
from halo_cluster.setup.steps import SetupOptions
from tests.conftest import ROOTS, halo_here

CONFIG = """[cluster]
name = "strix"

[[node]]
name = "node1"
ssh = "root@192.168.1.51"
fabric_address = "192.168.100.1"
halo = "halo"

[[node]]
name = "node2"
ssh = "root@192.168.1.52"
fabric_address = "192.168.100.2"
halo = "halo"
"""
# what each fake node is: its fixture root (hostname, addresses, steps)
SCENARIOS = {"node1": "connectx-roce", "node2": "strix-e810-misconfigured"}
PENDING = {
    "node1": ["packages", "firewall", "kernel", "ssh_key"],
    "node2": ["packages", "network", "firewall", "kernel", "memlock", "ssh_key"],
}
HOSTS = {"node1": ("gpu-node-a", "192.168.1.51"), "node2": ("strix2", "192.168.1.52")}


@pytest.fixture(autouse=True)
def this_machine_is_never_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite may run as root: applying on this machine would change it."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a test tried to apply setup steps on this machine")

    monkeypatch.setattr("halo_cluster.setup.apply.apply_steps", refuse)


@pytest.fixture(autouse=True)
def no_user_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No halo.toml is found but the one a test writes (cwd: an empty directory)."""
    (tmp_path / "xdg").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path / "cwd")


def node_answer(scenario: str, fail_apply: bool = False) -> Callable[[tuple[str, ...]], Result]:
    """``halo setup --local --json …`` as the node answers it, from its fixture root: the plan,
    or with --apply every pending step done and named as applied."""
    root = str(ROOTS / scenario)
    hostname = collect_inventory(root).hostname or "local"

    def answer(argv: tuple[str, ...]) -> Result:
        only = {a.split("=", 1)[1] for a in argv if a.startswith("--step=")} or None
        body = setup_here(root, SetupOptions(home="root"), only, False)
        if "--apply" in argv:
            if fail_apply:
                return Result(argv, 1, "", "halo: error: packages: dnf failed: no network\n")
            pending = [s["id"] for s in body["steps"] if not s["done"] and s["commands"]]
            body = {
                "steps": [{**s, "done": True} for s in body["steps"]],
                "reboot_needed": "kernel" in pending,
                "applied": pending,
            }
        return Result(argv, 0, json.dumps({"nodes": {hostname: body}}), "")

    return answer


@pytest.fixture
def nodes(monkeypatch: pytest.MonkeyPatch) -> dict[str, FakeRunner]:
    """The config's nodes as FakeRunners, in place of SSH."""
    fakes = {
        name: FakeRunner().on(["halo", "setup"], node_answer(s)) for name, s in SCENARIOS.items()
    }
    monkeypatch.setattr(
        "halo_cluster.client.node.ssh_clients", lambda config: clients_from(config, fakes)
    )
    return fakes


def me() -> Any:
    """This machine as setup names it (imported here: the module is new, and the other tests
    show what the code before it did)."""
    from halo_cluster.setup.targets import this_machine

    return this_machine(collect_inventory("/"), None)


def write_config(where: Path) -> Path:
    path = where / "halo.toml"
    path.write_text(CONFIG)
    return path


def applied_on(fake: FakeRunner) -> bool:
    return any("--apply" in call for call in fake.calls)


def expected_node(name: str, applied: bool) -> dict[str, Any]:
    """A node's complete entry in --json: its machine, then its steps as the node gave them."""
    body = setup_here(str(ROOTS / SCENARIOS[name]), SetupOptions(home="root"), None, False)
    if applied:
        body = {
            "steps": [{**s, "done": True} for s in body["steps"]],
            "reboot_needed": True,
            "applied": PENDING[name],
        }
    hostname, address = HOSTS[name]
    return {"hostname": hostname, "address": address, "node": name, **body, "error": None}


# -- with a config: its nodes, not this machine --------------------------------------------------
def test_apply_with_a_config_changes_its_nodes_not_this_machine(
    capsys: pytest.CaptureFixture[str], nodes: dict[str, FakeRunner], tmp_path: Path
) -> None:
    """The issue's case: ``halo setup --apply --config halo.toml`` set up the controller."""
    config = write_config(tmp_path)
    code, out, err = halo_here(
        capsys, "setup", "--apply", "--yes", "--config", str(config), "--json"
    )
    assert code == 0, err
    assert json.loads(out) == {
        "target": "nodes",
        "config": str(config),
        "nodes": {"node1": expected_node("node1", True), "node2": expected_node("node2", True)},
    }
    assert applied_on(nodes["node1"]) and applied_on(nodes["node2"])
    # each machine named, with what will change there, before it changes
    assert (
        "will change node1 (host gpu-node-a, 192.168.1.51): " + ", ".join(PENDING["node1"])
        in err.splitlines()
    )
    assert (
        "will change node2 (host strix2, 192.168.1.52): " + ", ".join(PENDING["node2"])
        in err.splitlines()
    )


def test_the_quickstart_setup_apply_with_halo_toml_beside_it(
    capsys: pytest.CaptureFixture[str], nodes: dict[str, FakeRunner]
) -> None:
    """The README's ``halo setup --apply``, with a halo.toml in the directory: every node."""
    write_config(Path.cwd())
    code, out, err = halo_here(capsys, "setup", "--apply", "--yes", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert (data["target"], data["config"]) == ("nodes", "halo.toml")
    assert {n: v["applied"] for n, v in data["nodes"].items()} == PENDING


def test_a_plan_with_a_config_asks_every_node_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], nodes: dict[str, FakeRunner], tmp_path: Path
) -> None:
    code, out, err = halo_here(capsys, "setup", "--config", str(write_config(tmp_path)), "--json")
    assert code == 0, err
    assert json.loads(out)["nodes"] == {
        "node1": expected_node("node1", False),
        "node2": expected_node("node2", False),
    }
    assert not applied_on(nodes["node1"]) and not applied_on(nodes["node2"])


def test_the_table_names_each_machine(
    capsys: pytest.CaptureFixture[str], nodes: dict[str, FakeRunner], tmp_path: Path
) -> None:
    code, out, err = halo_here(capsys, "setup", "--config", str(write_config(tmp_path)))
    assert code == 0, err
    assert "Setup of node1 (host gpu-node-a, 192.168.1.51)" in out
    assert "Setup of node2 (host strix2, 192.168.1.52)" in out
    assert "planning on 2 node(s) of " in err and ": node1, node2" in err


def test_node_names_some_of_them(
    capsys: pytest.CaptureFixture[str], nodes: dict[str, FakeRunner], tmp_path: Path
) -> None:
    config = str(write_config(tmp_path))
    code, out, err = halo_here(
        capsys, "setup", "--config", config, "--node", "node2", "--apply", "--yes", "--json"
    )
    assert code == 0, err
    assert list(json.loads(out)["nodes"]) == ["node2"]
    assert nodes["node1"].calls == [] and applied_on(nodes["node2"])


def test_without_yes_the_plan_is_named_then_asked(
    capsys: pytest.CaptureFixture[str],
    nodes: dict[str, FakeRunner],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    code, _, err = halo_here(capsys, "setup", "--apply", "--config", str(write_config(tmp_path)))
    assert code != 0
    assert err.index("will change node2 (host strix2") < err.index("apply these steps on")
    assert not applied_on(nodes["node1"]) and not applied_on(nodes["node2"])


def test_a_node_without_a_plan_stops_the_run_before_anything_changes(
    capsys: pytest.CaptureFixture[str], nodes: dict[str, FakeRunner], tmp_path: Path
) -> None:
    nodes["node2"].rules.clear()
    nodes["node2"].on(["halo", "setup"], Result((), 255, "", "ssh: connect to host: refused"))
    config = str(write_config(tmp_path))
    code, out, err = halo_here(capsys, "setup", "--config", config, "--apply", "--yes")
    assert code == 1 and out == ""
    assert err.splitlines()[-1] == (
        "halo: error: no plan from node2 (setup failed: ssh: connect to host: refused): "
        "nothing was changed; fix that, or leave the node out by naming the others with "
        "--node"
    )
    assert not applied_on(nodes["node1"])


def test_a_node_that_fails_to_apply_is_named_and_the_others_are_reported(
    capsys: pytest.CaptureFixture[str], nodes: dict[str, FakeRunner], tmp_path: Path
) -> None:
    nodes["node2"].rules.clear()
    nodes["node2"].on(["halo", "setup"], node_answer(SCENARIOS["node2"], fail_apply=True))
    config = str(write_config(tmp_path))
    code, out, err = halo_here(capsys, "setup", "--config", config, "--apply", "--yes", "--json")
    assert code == 1
    data = json.loads(out)["nodes"]
    assert data["node1"] == expected_node("node1", True)
    error = "setup failed: halo: error: packages: dnf failed: no network"
    assert data["node2"] == {
        "hostname": "strix2",
        "address": "192.168.1.52",
        "node": "node2",
        "steps": [],
        "reboot_needed": False,
        "applied": [],
        "error": error,
    }
    assert err.splitlines()[-1] == f"halo: error: setup failed on node2: {error}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--address", "192.168.100.1/30"),
            "--address is one machine's fabric address: name that node with --node NAME",
        ),
        (
            ("--local", "--node", "node1"),
            "--local is this machine, --node names nodes of the config: give one",
        ),
        (
            ("--root", str(ROOTS / "strix-e810"), "--node", "node1"),
            "--root plans for the files below DIR: drop --node, or drop --root",
        ),
    ],
)
def test_options_that_name_the_wrong_machines_are_one_line(
    capsys: pytest.CaptureFixture[str],
    nodes: dict[str, FakeRunner],
    tmp_path: Path,
    args: tuple[str, ...],
    message: str,
) -> None:
    config = str(write_config(tmp_path))
    code, out, err = halo_here(capsys, "setup", "--config", config, *args, "--apply", "--yes")
    assert (code, out, err) == (2, "", f"halo: error: {message}\n")
    assert nodes["node1"].calls == [] and nodes["node2"].calls == []


# -- --local: this machine, refused unless it is a node or --yes ---------------------------------
def test_local_apply_refuses_a_machine_that_is_not_a_node(
    capsys: pytest.CaptureFixture[str], nodes: dict[str, FakeRunner], tmp_path: Path
) -> None:
    config = write_config(tmp_path)
    code, out, err = halo_here(capsys, "setup", "--local", "--apply", "--config", str(config))
    here = me()
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (
        f"halo: error: this machine, {here.label()}, is not a node of {config}: pass --yes to "
        "change it anyway, or drop --local to set up the config's nodes"
    )
    assert nodes["node1"].calls == [] and nodes["node2"].calls == []


def test_local_plan_says_which_machine_and_that_it_is_not_a_node(
    capsys: pytest.CaptureFixture[str], nodes: dict[str, FakeRunner], tmp_path: Path
) -> None:
    config = write_config(tmp_path)
    code, out, err = halo_here(capsys, "setup", "--local", "--config", str(config), "--json")
    assert code == 0, err
    data = json.loads(out)
    here = me()
    assert (data["target"], data["config"], list(data["nodes"])) == (
        "local",
        str(config),
        [here.name],
    )
    entry = data["nodes"][here.name]
    assert (entry["hostname"], entry["address"], entry["node"], entry["error"]) == (
        here.hostname,
        here.address,
        None,
        None,
    )
    assert nodes["node1"].calls == [] and nodes["node2"].calls == []


def test_without_a_config_it_is_this_machine_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = halo_here(capsys, "setup", "--json")
    assert code == 0, err
    data = json.loads(out)
    here = me()
    assert (data["target"], data["config"], list(data["nodes"])) == ("local", None, [here.name])
    code, _, err = halo_here(capsys, "setup")
    assert code == 0
    assert err.splitlines()[0] == (
        "no cluster config (--config FILE, ./halo.toml, $XDG_CONFIG_HOME/halo/halo.toml): "
        f"this machine only, {here.label()}"
    )


def test_a_root_plans_for_its_files_whatever_config_is_found(
    capsys: pytest.CaptureFixture[str], nodes: dict[str, FakeRunner]
) -> None:
    write_config(Path.cwd())
    root = str(ROOTS / "strix-e810-misconfigured")
    code, out, err = halo_here(capsys, "setup", "--root", root, "--json")
    assert code == 0, err
    expected = setup_here(root, SetupOptions(home=str(Path.home()).lstrip("/")), None, False)
    assert json.loads(out) == {
        "target": "local",
        "config": None,
        "nodes": {
            "strix2": {
                "hostname": "strix2",
                "address": "192.168.1.52",
                "node": None,
                **expected,
                "error": None,
            }
        },
    }
    assert nodes["node1"].calls == [] and nodes["node2"].calls == []


# -- which node this machine is ------------------------------------------------------------------
def test_this_machine_is_the_node_with_its_hostname_or_an_address(tmp_path: Path) -> None:
    from halo_cluster.setup.targets import Machine, addresses, node_of, this_machine

    inv = collect_inventory(str(ROOTS / "strix-e810"))  # strix1: 192.168.1.51, 192.168.100.1
    assert addresses(inv) == ["192.168.1.51", "192.168.100.1"]

    def node(body: str) -> str | None:
        (tmp_path / "halo.toml").write_text(body)
        return node_of(inv, load_config(tmp_path / "halo.toml"))

    assert node('[[node]]\nname = "a"\nssh = "root@10.0.0.9"\n') is None
    assert node('[[node]]\nname = "strix1"\nssh = "root@10.0.0.9"\n') == "strix1"
    assert node('[[node]]\nname = "a"\nssh = "root@strix1.lan"\n') == "a"
    assert node('[[node]]\nname = "a"\nssh = "root@192.168.1.51"\n') == "a"
    assert node('[[node]]\nname = "a"\nssh = "x"\nfabric_address = "192.168.100.1"\n') == "a"
    assert node('[[node]]\nname = "a"\nssh = "x"\nmgmt_address = "192.168.1.51"\n') == "a"
    assert node('[[node]]\nname = "a"\nssh = "localhost"\n') == "a"
    assert this_machine(inv, None) == Machine("strix1", "strix1", "192.168.1.51", None)
    assert Machine("n", None, None, None).label() == "n (host unknown)"


MESH = """[cluster]
name = "usb4"
transport = "thunderbolt"

[[node]]
name = "node1"
ssh = "root@192.168.1.51"
fabric_address = "10.0.0.1"
halo = "halo"
links = { thunderbolt0 = "node2", thunderbolt1 = "node3" }

[[node]]
name = "node2"
ssh = "root@192.168.1.52"
fabric_address = "10.0.0.2"
halo = "halo"
links = { thunderbolt0 = "node1", thunderbolt1 = "node3" }

[[node]]
name = "node3"
ssh = "root@192.168.1.53"
fabric_address = "10.0.0.3"
halo = "halo"
links = { thunderbolt0 = "node1", thunderbolt1 = "node2" }
"""


def test_a_cabled_cluster_sends_each_node_its_own_part_of_the_fabric(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "halo.toml").write_text(MESH)
    config = load_config(tmp_path / "halo.toml")
    mesh = config.mesh()
    assert mesh is not None
    fakes = {
        n: FakeRunner().on(["halo", "setup"], node_answer("strix-e810"))
        for n in ("node1", "node2", "node3")
    }
    monkeypatch.setattr(
        "halo_cluster.client.node.ssh_clients", lambda config: clients_from(config, fakes)
    )
    code, out, err = halo_here(capsys, "setup", "--config", str(tmp_path / "halo.toml"), "--json")
    assert code == 0, err
    assert list(json.loads(out)["nodes"]) == ["node1", "node2", "node3"]
    for name, fake in fakes.items():
        (call,) = fake.calls
        sent = call[call.index("--fabric") + 1]
        assert json.loads(sent) == mesh.node(name).to_dict()
