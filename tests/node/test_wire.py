"""The wire's argv (halo_cluster.wire): every builder writes what the node's parser
(node/main.py, built from the same definitions) reads back as the values given, for any
values (hypothesis); the builders write the bytes the controller's call sites write today;
an installed halo's own commands (inventory, setup) read them too."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halo_cluster import wire
from halo_cluster.node.main import parser
from halo_cluster.wire import commands


def parsed(argv: list[str]) -> dict[str, Any]:
    """The node's reading of ``argv`` (without the handler); a usage error fails the test."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as refused:  # pragma: no cover - the failure shows the argv
        raise AssertionError(f"the node refused {argv}") from refused
    return {k: v for k, v in vars(args).items() if k != "handler"}


# Values as the controller has them. Anything but NUL (argv cannot carry it); a value that
# starts with "-" would read as an option, so the builders refuse it (tested below).
TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=40)
VALUE = TEXT.filter(lambda s: not s.startswith("-"))
WORD = VALUE.filter(lambda s: s != "" and "," not in s)  # an item of A,B or of a peer
HOST = WORD.filter(lambda s: not (s.startswith("[") or s.endswith("]")))
PORT = st.integers(0, 10**6)
SECONDS = st.floats(0, 1e7, allow_nan=False)
ROOT = st.none() | VALUE


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


def or_default(value: Any, default: Any) -> Any:
    return default if value is None else value


def g(value: float | None, default: float) -> float:
    """What the node reads from a float the controller wrote (six significant digits)."""
    return default if value is None else float(f"{value:g}")


@settings(deadline=None)
@given(versions=st.booleans(), root=ROOT)
def test_inventory(versions: bool, root: str | None) -> None:
    assert parsed(wire.inventory_args(versions, root)) == {
        "command": "inventory",
        "root": or_default(root, "/"),
        "json": True,
        "versions": versions,
    }


@settings(deadline=None)
@given(
    fabric=maybe(VALUE),
    mgmt=maybe(VALUE),
    rdma=maybe(st.tuples(WORD, st.integers(1, 255))),
    root=ROOT,
    links=st.lists(VALUE, max_size=3),
)
def test_counters(
    fabric: str | None,
    mgmt: str | None,
    rdma: tuple[str, int] | None,
    root: str | None,
    links: list[str],
) -> None:
    assert parsed(wire.counters_args(fabric, mgmt, rdma, root, links)) == {
        "command": "counters",
        "root": or_default(root, "/"),
        "fabric": fabric,
        "mgmt": mgmt,
        "rdma": rdma,
        "link": links,
    }


@settings(deadline=None)
@given(root=ROOT)
def test_power(root: str | None) -> None:
    assert parsed(wire.power_args(root)) == {"command": "power", "root": or_default(root, "/")}


@settings(deadline=None)
@given(host=VALUE, port=PORT, tokens=st.integers(1, 4096))
def test_serve_health_and_probe(host: str, port: int, tokens: int) -> None:
    assert parsed(wire.serve_health_args(host, port)) == {
        "command": "serve-health",
        "host": host,
        "port": port,
    }
    assert parsed(wire.serve_probe_args(host, port, tokens)) == {
        "command": "serve-probe",
        "host": host,
        "port": port,
        "tokens": tokens,
    }


@settings(deadline=None)
@given(path=VALUE)
def test_gguf_layers(path: str) -> None:
    assert parsed(wire.gguf_layers_args(path)) == {"command": "gguf-layers", "path": path}


@settings(deadline=None)
@given(wait=maybe(st.lists(WORD, max_size=4)), timeout=maybe(SECONDS))
def test_ray_nodes(wait: list[str] | None, timeout: float | None) -> None:
    assert parsed(wire.ray_nodes_args(wait, timeout)) == {
        "command": "ray-nodes",
        "wait": None if wait is None else tuple(wait),
        "timeout": g(timeout, 60.0),
    }


@settings(deadline=None)
@given(bind=VALUE, port=st.integers(1, 65535), limit=maybe(SECONDS))
def test_net_probe_serve(bind: str, port: int, limit: float | None) -> None:
    assert parsed(wire.net_probe_serve_args(bind, port, limit)) == {
        "command": "net-probe",
        "mode": "serve",
        "bind": bind,
        "port": port,
        "limit": g(limit, 120.0),
    }


COUNT = st.integers(1, commands.MAX_COUNT)


@settings(deadline=None)
@given(host=HOST, port=PORT, seconds=maybe(SECONDS), size=maybe(COUNT), streams=maybe(COUNT))
def test_net_probe_clients(
    host: str, port: int, seconds: float | None, size: int | None, streams: int | None
) -> None:
    common = {"command": "net-probe", "target": (host, port), "seconds": g(seconds, 5.0)}
    assert parsed(wire.net_probe_ping_args(host, port, seconds, size)) == {
        **common,
        "mode": "ping",
        "size": 64 if size is None else size,
    }
    assert parsed(wire.net_probe_stream_args(host, port, seconds, streams)) == {
        **common,
        "mode": "stream",
        "streams": 4 if streams is None else streams,
    }


def test_bench_driver_and_node_info() -> None:
    assert parsed(wire.bench_driver_args()) == {"command": "bench-driver"}
    assert parsed(wire.node_info_args()) == {"command": "node-info"}


SETUP = {
    "distro": st.sampled_from(["auto", "fedora", "ubuntu", "debian"]),
    "mtu": st.integers(1280, 65520),
    "steps": st.lists(TEXT, max_size=3),  # --step=VALUE: any value, "-" first or not
    "fabric_iface": maybe(VALUE),
    "address": maybe(VALUE),
    "apply": st.booleans(),
    "root": ROOT,
    "fabric": maybe(VALUE),
    "names": st.lists(st.tuples(WORD, WORD), max_size=3),
}


@settings(deadline=None)
@given(**SETUP)
def test_setup(
    distro: str,
    mtu: int,
    steps: list[str],
    fabric_iface: str | None,
    address: str | None,
    apply: bool,
    root: str | None,
    fabric: str | None,
    names: list[tuple[str, str]],
) -> None:
    argv = wire.setup_args(distro, mtu, steps, fabric_iface, address, apply, root, fabric, names)
    assert parsed(argv) == {
        "command": "setup",
        "root": or_default(root, "/"),
        "local": True,
        "json": True,
        "distro": distro,
        "mtu": mtu,
        "step": steps,
        "fabric_iface": fabric_iface,
        "address": address,
        "fabric": fabric,
        "name": [f"{name}={address}" for name, address in names],
        "apply": apply,
        "yes": apply,
    }


PEER = st.tuples(WORD, st.sampled_from(["fabric", "mgmt"]), WORD)
EXPORTER = {
    "listen": VALUE,
    "interval": maybe(VALUE),
    "peers": st.lists(PEER, max_size=3),
    "echo": st.lists(VALUE, max_size=3),
    "probe": st.lists(VALUE, max_size=3),
    "probe_port": maybe(st.integers(1, 65535)),
    "rescan": maybe(VALUE),
    "rdma_probe_every": maybe(VALUE),
    "once": st.booleans(),
    "root": ROOT,
}


@settings(deadline=None)
@given(**EXPORTER)
def test_exporter(**values: Any) -> None:
    assert parsed(wire.exporter_args(**values)) == {
        "command": "exporter",
        "root": or_default(values["root"], "/"),
        "listen": values["listen"],
        "interval": or_default(values["interval"], "1s"),
        "peer": values["peers"],
        "echo": values["echo"],
        "probe": values["probe"],
        "probe_port": or_default(values["probe_port"], 9878),
        "rescan": or_default(values["rescan"], "10s"),
        "rdma_probe_every": values["rdma_probe_every"],
        "once": values["once"],
    }


NAME = WORD.filter(lambda s: "/" not in s)


@settings(deadline=None)
@given(store=VALUE, name=NAME, path=VALUE.filter(bool), prefixes=st.lists(VALUE, max_size=3))
def test_model_commands(store: str, name: str, path: str, prefixes: list[str]) -> None:
    for command in (commands.MODEL_STATE, commands.MODEL_VERIFY, commands.MODEL_RM):
        argv = command.argv(store=store, name=name)
        assert parsed(argv) == {"command": command.name, "store": store, "name": name}
    assert parsed(commands.MODEL_LIST.argv(store=store)) == {
        "command": "model-list",
        "store": store,
    }
    hashed = commands.MODEL_HASH.argv(store=store, name=name, prefix=prefixes, path=path)
    assert parsed(hashed) == {
        "command": "model-hash", "store": store, "name": name, "prefix": prefixes, "path": path,
    }  # fmt: skip
    assert parsed(commands.MODEL_PIPE.argv()) == {"command": "model-pipe"}  # spec: environment
    assert parsed(commands.MODEL_STOP.argv(run=name)) == {"command": "model-stop", "run": name}
    trim = commands.RPC_CACHE.argv(store=store, quota_bytes=1 << 36)
    assert parsed(trim) == {"command": "rpc-cache", "store": store, "quota_bytes": 1 << 36}
    looked = parsed(commands.RPC_CACHE.argv(store=store))
    assert looked == {"command": "rpc-cache", "store": store, "quota_bytes": None}
    spec = "/root/.local/state/halo/supervise-lab.spec.json"
    assert wire.supervise_args(spec) == ["supervise", "--spec", spec]
    assert parsed(wire.supervise_args(spec)) == {"command": "supervise", "spec": spec}


@settings(deadline=None)
@given(
    host=VALUE,
    port=PORT,
    prompts=st.lists(TEXT, min_size=1, max_size=4),
    tokens=st.integers(1, 256),
    top=st.integers(1, 20),
)
def test_serve_tokens(host: str, port: int, prompts: list[str], tokens: int, top: int) -> None:
    """Prompts travel as --prompt=TEXT: one that starts with '-' is still a prompt."""
    assert parsed(wire.serve_tokens_args(host, port, prompts, tokens, top)) == {
        "command": "serve-tokens",
        "host": host,
        "port": port,
        "tokens": tokens,
        "top": top,
        "prompt": prompts,
    }


def test_every_command_has_its_builder_tested() -> None:
    tested = {
        "inventory", "counters", "power", "serve-health", "serve-probe", "serve-tokens", "gguf-layers",
        "ray-nodes",
        "net-probe", "bench-driver", "setup", "exporter", "node-info", "model-list",
        "model-state", "model-verify", "model-rm", "model-hash", "model-pipe", "model-stop",
        "rpc-cache", "supervise",
    }  # fmt: skip
    assert set(wire.NAMES) == tested
    assert [m.name for m in commands.NET_PROBE.modes] == ["serve", "ping", "stream"]


# -- the bytes: what the controller's call sites write today ---------------------------------
REGISTER_TIMEOUT_S = 120.0
TODAY: list[tuple[str, list[str], Callable[[], list[str]]]] = [
    (
        "cluster/proof.py counters_argv",
        [
            "counters",
            "--fabric",
            "192.168.100.1",
            "--mgmt",
            "192.168.1.51",
            "--rdma",
            "rocep194s0:1",
        ],
        lambda: wire.counters_args("192.168.100.1", "192.168.1.51", ("rocep194s0", 1)),
    ),
    ("cluster/proof.py, no plan", ["counters"], lambda: wire.counters_args()),
    ("cluster/gather.py", ["inventory", "--json", "--versions"], lambda: wire.inventory_args()),
    (
        "cluster/llama_server.py _layers",
        ["gguf-layers", "/models/m.gguf"],
        lambda: wire.gguf_layers_args("/models/m.gguf"),
    ),
    ("ray/lifecycle.py nodes_table", ["ray-nodes"], lambda: wire.ray_nodes_args()),
    (
        "ray/lifecycle.py register",
        ["ray-nodes", "--wait", "10.0.0.1,10.0.0.2", "--timeout", f"{REGISTER_TIMEOUT_S:g}"],
        lambda: wire.ray_nodes_args(["10.0.0.1", "10.0.0.2"], REGISTER_TIMEOUT_S),
    ),
    (
        "ray/lifecycle.py health, cluster/serve.py _wait_healthy",
        ["serve-health", "--host", "127.0.0.1", "--port", "8000"],
        lambda: wire.serve_health_args("127.0.0.1", 8000),
    ),
    (
        "cluster/serve.py _complete",
        ["serve-probe", "--host", "127.0.0.1", "--port", "8000", "--tokens", "32"],
        lambda: wire.serve_probe_args("127.0.0.1", 8000, 32),
    ),
    (
        "serving/reference.py ask",
        [
            *("serve-tokens", "--host", "127.0.0.1", "--port", "8000", "--tokens", "32"),
            *("--top", "5", "--prompt=The capital of France is"),
        ],
        lambda: wire.serve_tokens_args("127.0.0.1", 8000, ["The capital of France is"], 32, 5),
    ),
    ("bench/cluster.py", ["bench-driver"], lambda: wire.bench_driver_args()),
    (
        "bench/net.py server",
        ["net-probe", "serve", "--bind", "10.0.0.2", "--port", "5201", "--limit", "20"],
        lambda: wire.net_probe_serve_args("10.0.0.2", 5201, 20.0),  # _limit() + 5
    ),
    (
        "bench/net.py ping",
        ["net-probe", "ping", "10.0.0.2:5201", "--seconds", "0.5"],
        lambda: wire.net_probe_ping_args("10.0.0.2", 5201, 0.5),
    ),
    (
        "bench/net.py stream",
        ["net-probe", "stream", "10.0.0.2:5201", "--seconds", "3", "--streams", "4"],
        lambda: wire.net_probe_stream_args("10.0.0.2", 5201, 3.0, 4),
    ),
    (
        "cli/setup.py",
        [
            *("setup", "--local", "--json", "--distro", "debian", "--mtu", "9000"),
            *("--step=mtu", "--step=memlock", "--fabric-iface", "enp1s0"),
            *("--address", "192.168.100.1/30", "--apply", "--yes"),
        ],
        lambda: wire.setup_args(
            "debian", 9000, ["mtu", "memlock"], "enp1s0", "192.168.100.1/30", apply=True
        ),
    ),
    (
        "monitor/deploy.py exporter_argv",
        [
            *("exporter", "--listen", "192.168.1.51:9877", "--interval", "1s"),
            *("--peer", "strix2,fabric,192.168.100.2", "--peer", "strix2,mgmt,192.168.1.52"),
            *("--echo", "192.168.100.1", "--echo", "192.168.1.51"),
        ],
        lambda: wire.exporter_args(
            "192.168.1.51:9877",
            "1s",
            peers=[("strix2", "fabric", "192.168.100.2"), ("strix2", "mgmt", "192.168.1.52")],
            echo=["192.168.100.1", "192.168.1.51"],
        ),
    ),
    ("tests: node-info", ["node-info"], lambda: wire.node_info_args()),
]


@pytest.mark.parametrize(("site", "argv", "built"), TODAY, ids=[t[0] for t in TODAY])
def test_the_builders_write_todays_bytes(
    site: str, argv: list[str], built: Callable[[], list[str]]
) -> None:
    assert built() == argv
    parsed(argv)  # and the node reads them


def test_a_value_that_would_read_as_an_option_is_refused() -> None:
    with pytest.raises(ValueError, match=r"gguf-layers path: '-x\.gguf' would read as an option"):
        wire.gguf_layers_args("-x.gguf")
    with pytest.raises(ValueError, match="serve-health --host: '-h' would read as an option"):
        wire.serve_health_args("-h", 1)
    assert wire.setup_args("auto", 9000, ["-odd"]) == [
        *("setup", "--local", "--json", "--distro", "auto", "--mtu", "9000", "--step=-odd"),
    ]  # --step=VALUE carries it


def test_an_unknown_argument_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match="counters: no argument fabirc"):
        commands.COUNTERS.argv(fabirc="10.0.0.1")


# -- values the node refuses: one line, a usage error ------------------------------------------
@pytest.mark.parametrize(
    ("kind", "text", "reason"),
    [
        (commands.RDMA, "mlx5_0", "'mlx5_0': use DEVICE:PORT (PORT from 1 to 255)"),
        (commands.RDMA, "mlx5_0:", "'mlx5_0:': use DEVICE:PORT (PORT from 1 to 255)"),
        (commands.RDMA, ":1", "':1': use DEVICE:PORT (PORT from 1 to 255)"),
        (commands.RDMA, "mlx5_0:1.5", "'mlx5_0:1.5': use DEVICE:PORT (PORT from 1 to 255)"),
        (commands.RDMA, "mlx5_0:١", "'mlx5_0:١': use DEVICE:PORT (PORT from 1 to 255)"),
        (commands.TARGET, "10.0.0.1", "'10.0.0.1': use ADDRESS:PORT"),
        (commands.PEER, "a,b,c", "'a,b,c': use NAME,fabric|mgmt,ADDRESS"),
        (commands.PEER, "a,fabric,", "'a,fabric,': use NAME,fabric|mgmt,ADDRESS"),
        (commands.INT, "x", "'x' is not an integer"),
        (commands.FLOAT, "soon", "'soon' is not a number"),
    ],
)
def test_values_the_node_refuses(kind: str, text: str, reason: str) -> None:
    with pytest.raises(ValueError) as refused:
        wire.read_value(wire.Arg("--x", kind), text)
    assert str(refused.value) == reason


def test_rdma_splits_at_the_last_colon() -> None:
    assert wire.read_value(wire.Arg("--rdma", commands.RDMA), "a:b:2") == ("a:b", 2)
    assert wire.read_value(wire.Arg("--t", commands.TARGET), "[fe80::1]:5201") == ("fe80::1", 5201)


# -- an installed halo reads the same argv with its own commands --------------------------------
def test_an_installed_halo_reads_inventory_and_setup() -> None:
    from halo_cluster.cli.inventory import inventory
    from halo_cluster.cli.setup import STEP_IDS, setup

    got = inventory.make_context("inventory", wire.inventory_args()[1:]).params
    assert got == {"root": "/", "as_json": True, "versions": True}
    argv = wire.setup_args("ubuntu", 1500, list(STEP_IDS[:2]), "eth1", "10.0.0.1/30", True)
    params = setup.make_context("setup", argv[1:]).params
    assert {k: params[k] for k in ("local", "as_json", "distro", "mtu", "steps", "do_apply")} == {
        "local": True,
        "as_json": True,
        "distro": "ubuntu",
        "mtu": 1500,
        "steps": tuple(STEP_IDS[:2]),
        "do_apply": True,
    }
    assert (params["fabric_iface"], params["address"], params["yes"]) == (
        "eth1",
        "10.0.0.1/30",
        True,
    )


def test_the_parser_is_argparse_built_from_the_wire() -> None:
    top = parser()
    assert isinstance(top, argparse.ArgumentParser)
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(wire.NAMES)
