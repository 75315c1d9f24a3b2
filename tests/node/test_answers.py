"""The wire's answers (halo_cluster.wire.answers): each parser reads what the node side
really prints (the commands run on the fixture roots, on loopback servers, on a stand-in for
Ray's table) into complete expected objects, whose ``to_dict()`` is that JSON again; anything
else is one WireError of one line, never another exception."""

from __future__ import annotations

import json
import platform
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halo_cluster import __version__
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.model import PathCounters, PowerReading
from halo_cluster.node import net_probe, ray_nodes
from halo_cluster.node.main import main
from halo_cluster.wire import (
    Counters,
    NodeInfo,
    Power,
    RayNode,
    ServeHealth,
    ServeProbe,
    ServeTokens,
    Setup,
    SetupStep,
    WireError,
    parse_counters,
    parse_gguf_layers,
    parse_inventory,
    parse_node_info,
    parse_ping,
    parse_power,
    parse_ray_nodes,
    parse_serve_health,
    parse_serve_probe,
    parse_serve_tokens,
    parse_setup,
    parse_stream,
)
from halo_cluster.wire.answers import TokenAnswer, TokenStep
from tests.conftest import OUTPUTS, ROOTS, SCENARIOS, free_port

STRIX = str(ROOTS / "strix-e810")


def printed(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What the node command prints (it must succeed, silently on stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    return out


def test_counters(capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--fabric", "192.168.100.1", "--mgmt", "192.168.1.51", "--rdma", "rocep194s0:1"]
    out = printed(["counters", "--root", STRIX, *flags], capsys)
    answer = parse_counters(out)
    assert answer == Counters(
        {
            "fabric": PathCounters("enp194s0np0", None, None),
            "mgmt": PathCounters("enp191s0", None, None),
            "rdma": PathCounters("rocep194s0/1", 871234561024, 918273647168),
        },
        (),
    )
    assert answer.to_dict() == json.loads(out)
    out = printed(
        ["counters", "--root", STRIX, "--fabric", "10.9.9.9", "--rdma", "mlx5_9:1"], capsys
    )
    assert parse_counters(out) == Counters(
        {}, ("no interface holds 10.9.9.9 (fabric)", "no RDMA port mlx5_9/1")
    )


def test_power(capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(["power", "--root", STRIX], capsys)
    answer = parse_power(out)
    assert answer == Power(
        (
            PowerReading("hwmon3/power1_average", "amdgpu", "gpu", "power", 74.0),
            PowerReading("hwmon3/power1_input", "amdgpu", "gpu", "power", 61.25),
            PowerReading(
                "intel-rapl:0/energy_uj", "rapl", "package-0", "energy", 51234.56789, 65532.610987
            ),
        ),
        (),
    )
    assert answer.to_dict() == json.loads(out)
    odd = parse_power(printed(["power", "--root", str(ROOTS / "odd-content")], capsys))
    assert odd.readings == (PowerReading("hwmon1/power1_input", "amdgpu", "gpu", "power", 12.0),)
    assert len(odd.warnings) == 3 and "a negative power or energy reading" in odd.warnings[0]
    # a root without sources (as a lab node): no reading, no warning
    assert parse_power(printed(["power", "--root", str(ROOTS / "no-rdma")], capsys)) == Power(())


@settings(deadline=None)
@given(
    readings=st.lists(
        st.builds(
            PowerReading,
            st.text(max_size=20),
            st.sampled_from(["amdgpu", "rapl", "amd-smi"]),
            st.text(max_size=20),
            st.sampled_from(["power", "energy"]),
            st.floats(0, 1e12, allow_nan=False),
            st.none() | st.floats(0, 1e12, allow_nan=False),
        ),
        max_size=5,
    ),
    warnings=st.lists(st.text(max_size=20), max_size=3),
)
def test_a_power_answer_reads_back_as_it_was_printed(
    readings: list[PowerReading], warnings: list[str]
) -> None:
    answer = Power(tuple(readings), tuple(warnings))
    assert parse_power(json.dumps(answer.to_dict())) == answer


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_inventory(scenario: str, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(ROOTS / scenario)
    out = printed(["inventory", "--root", root, "--json"], capsys)
    assert parse_inventory(out) == collect_inventory(root)


def test_setup(capsys: pytest.CaptureFixture[str]) -> None:
    from halo_cluster.setup.apply import current_steps
    from halo_cluster.setup.steps import SetupOptions

    out = printed(["setup", "--root", STRIX, "--local", "--json", "--distro", "fedora"], capsys)
    opts = SetupOptions("fedora", None, None, 9000, str(Path.home()).lstrip("/"))
    steps = tuple(
        SetupStep(
            s.id,
            s.title,
            s.done,
            tuple(a.display().rstrip("\n") for a in s.actions),
            s.reboot,
            s.check,
            s.note,
        )
        for s in current_steps(STRIX, opts)
    )
    answer = parse_setup(out)
    assert answer == Setup("strix1", steps, False, ())
    assert len(steps) == 7 and answer.to_dict() == json.loads(out)


def test_node_info(capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(["node-info"], capsys)
    assert parse_node_info(out) == NodeInfo(__version__, platform.python_version())


def test_gguf_layers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_node_main import write_gguf

    out = printed(["gguf-layers", str(write_gguf(tmp_path / "m.gguf", 5))], capsys)
    assert (out, parse_gguf_layers(out)) == ("5\n", 5)


# -- serve-health, serve-probe: a small OpenAI-compatible server on loopback -------------------
class _Server(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def _answer(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        self._answer(
            {"data": [{"id": "tiny"}, {"object": "model"}]} if "models" in self.path else {}
        )

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append((self.path, self.headers.get("Authorization")))
        self._answer({"usage": {"completion_tokens": body["max_tokens"]}})

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def server() -> Iterator[int]:
    _Server.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_serve_health_and_probe(
    server: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HALO_SERVE_KEY", "k")
    out = printed(["serve-health", "--port", str(server)], capsys)
    assert parse_serve_health(out) == ServeHealth(("tiny", None))
    out = printed(["serve-probe", "--port", str(server), "--tokens", "7"], capsys)
    answer = parse_serve_probe(out)
    assert answer == ServeProbe("tiny", 7, json.loads(out)["seconds"])
    assert 0 <= answer.seconds < 30 and answer.to_dict() == json.loads(out)
    assert {auth for _path, auth in _Server.seen} == {"Bearer k"}


# -- serve-tokens: the engines' own answers, recorded from the lab's tiny model -------------
class _Recorded(_Server):
    answer: ClassVar[object] = None
    asked: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        self.asked.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self._answer(self.answer)


def _llama_steps() -> tuple[TokenStep, ...]:
    """llama-server's steps: ids and a top list of its own."""
    return (
        TokenStep(" 3705", 2335, -7.054049491882324, (("#2335", -7.054049491882324), ("#1919", -7.278371810913086))),
        TokenStep(" 3705", 2335, -7.202401161193848, (("#2335", -7.202401161193848), ("#1919", -7.241205215454102))),
        TokenStep(" 3705", 2335, -7.2189621925354, (("#2335", -7.2189621925354), ("#1919", -7.236204147338867))),
    )  # fmt: skip


def _vllm_steps() -> tuple[TokenStep, ...]:
    """vLLM's columns: tokens by their text, a top dict per step."""
    return (
        TokenStep(" 3705", None, -7.138538837432861, ((" 3705", -7.138538837432861), ("486", -7.255726337432861))),
        TokenStep(" 3705", None, -7.200428485870361, ((" 3705", -7.200428485870361), ("486", -7.247303485870361))),
        TokenStep(" 3705", None, -7.215699195861816, ((" 3705", -7.215699195861816), ("486", -7.239136695861816))),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("recorded", "steps"),
    [("llama-server-completion.json", _llama_steps), ("vllm-completion.json", _vllm_steps)],
)
def test_serve_tokens_reads_both_engines_answers(
    recorded: str,
    steps: Callable[[], tuple[TokenStep, ...]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _Recorded.answer = json.loads((OUTPUTS / "tokens" / recorded).read_text())
    _Recorded.asked = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorded)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        port = str(httpd.server_address[1])
        argv = ["serve-tokens", "--port", port, "--tokens", "3", "--top", "2"]
        out = printed([*argv, "--prompt=a", "--prompt=-b"], capsys)
    finally:
        httpd.shutdown()
        httpd.server_close()
    answer = TokenAnswer(" 3705 3705 3705", steps())
    assert parse_serve_tokens(out) == ServeTokens("tiny", (answer, answer))
    assert parse_serve_tokens(out).to_dict() == json.loads(out)
    assert [(a["prompt"], a["max_tokens"], a["logprobs"]) for a in _Recorded.asked] == [
        ("a", 3, 2),
        ("-b", 3, 2),
    ]
    assert {(a["temperature"], a["ignore_eos"]) for a in _Recorded.asked} == {(0.0, True)}


def test_an_answer_without_logprobs_is_its_text() -> None:
    from halo_cluster.node.serve_api import answer_of

    assert answer_of({"choices": [{"text": "x", "logprobs": None}]}) == TokenAnswer("x", ())
    with pytest.raises(ValueError, match="no choices"):
        answer_of({"choices": []})


# -- ray-nodes: Ray's table as the GCS gives it (a stand-in for Ray) --------------------------
@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> list[RayNode]:
    nodes = [RayNode("10.0.0.1", True, {"CPU": 4.0, "node:10.0.0.1": 1.0})]
    nodes.append(RayNode("10.0.0.2", False, {"CPU": 4.0}))
    monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))
    monkeypatch.setattr(ray_nodes, "_gcs_nodes", lambda: list(nodes))
    return nodes


def test_ray_nodes(table: list[RayNode], capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(["ray-nodes"], capsys)
    assert parse_ray_nodes(out) == tuple(table)
    out = printed(["ray-nodes", "--wait", "10.0.0.1", "--timeout", "5"], capsys)
    assert parse_ray_nodes(out) == tuple(table)
    assert main(["ray-nodes", "--wait", "10.0.0.1,10.0.0.2", "--timeout", "0"]) == 1
    assert capsys.readouterr() == ("", "halo: error: not registered with Ray: 10.0.0.2\n")


# -- net-probe: the built-in probe on loopback ---------------------------------------------------
def test_net_probe(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    threading.Thread(target=net_probe.serve, args=("127.0.0.1", port, 10.0), daemon=True).start()
    target = f"127.0.0.1:{port}"
    out = _retry(
        lambda: printed(["net-probe", "ping", target, "--seconds", "0.2", "--size", "99"], capsys)
    )
    ping = parse_ping(out)
    assert (ping.tool, ping.size, ping.samples > 0, ping.to_dict()) == (
        "builtin",
        99,
        True,
        json.loads(out),
    )
    out = printed(["net-probe", "stream", target, "--seconds", "0.2", "--streams", "2"], capsys)
    stream = parse_stream(out)
    assert (stream.tool, stream.streams, stream.gbps > 0) == ("builtin", 2, True)
    assert stream.to_dict() == json.loads(out)


def _retry(run: Callable[[], str]) -> str:
    for _ in range(100):  # the server thread may not listen yet
        try:
            return run()
        except AssertionError:
            threading.Event().wait(0.05)
    return run()


def test_a_ping_of_no_time_has_no_samples_and_no_error() -> None:
    port = free_port()
    threading.Thread(target=net_probe.serve, args=("127.0.0.1", port, 5.0), daemon=True).start()
    for _ in range(100):
        try:
            ping = net_probe.ping("127.0.0.1", port, 0.0)
            break
        except ConnectionRefusedError:
            threading.Event().wait(0.05)
    assert (ping.samples, ping.avg_us) == (0, 0.0)


# -- garbage: one WireError, one line ---------------------------------------------------------
GARBAGE = [
    (parse_counters, "", "counters: not JSON (got '')"),
    (parse_counters, "[]", "counters: not an object (got [])"),
    (parse_counters, '{"paths": {}}', "counters: no warnings (got keys ['paths'])"),
    (
        parse_counters,
        '{"paths": {"fa\\nbric": {"name": "e", "rx_bytes": "12", "tx_bytes": null}}, "warnings": []}',
        "counters: paths['fa\\nbric'].rx_bytes is not an integer or null (got '12')",
    ),
    (parse_counters, '{"paths": [], "warnings": []}', "counters: paths is not an object (got [])"),
    (
        parse_counters,
        '{"paths": {}, "warnings": ["ok", 3]}',
        "counters: warnings[1] is not a string (got 3)",
    ),
    (
        parse_serve_health,
        '{"models": [1]}',
        "serve-health: models[0] is not a string or null (got 1)",
    ),
    (
        parse_serve_probe,
        '{"model": "m", "completion_tokens": true, "seconds": 1}',
        "serve-probe: completion_tokens is not an integer (got True)",
    ),
    (
        parse_serve_probe,
        '{"model": "m", "completion_tokens": 1, "seconds": 1' + "0" * 400 + "}",
        # a number JSON cannot hold in 64 bits is refused as the answer is parsed (bounded/jsonin.py)
        'serve-probe: not JSON (got \'{"model": "m", "completion_tokens": 1, "seconds": 100000000)',
    ),
    (
        parse_gguf_layers,
        "halo: error: x\n",
        "gguf-layers: not a layer count (got 'halo: error: x\\n')",
    ),
    (parse_gguf_layers, "-3\n", "gguf-layers: not a layer count (got '-3\\n')"),
    (
        parse_gguf_layers,
        f"{2**64 - 1}\n",
        "gguf-layers: not a model's layer count (1 to 100000) (got '18446744073709551615')",
    ),
    (
        parse_gguf_layers,
        "0\n",
        "gguf-layers: not a model's layer count (1 to 100000) (got '0')",
    ),
    (
        parse_serve_tokens,
        '{"model": "m", "answers": [{"text": "x", "steps": [{"token": "a", "id": null, '
        '"logprob": -1, "top": [["a"]]}]}]}',
        "serve-tokens: answers[0].steps[0].top[0] is not [token, logprob] (got ['a'])",
    ),
    (
        parse_serve_tokens,
        '{"model": "m", "answers": [{"text": "x", "steps": [{"token": "a", "id": "7", '
        '"logprob": -1, "top": []}]}]}',
        "serve-tokens: answers[0].steps[0].id is not an integer or null (got '7')",
    ),
    (parse_ray_nodes, '{"a": 1}', "ray-nodes: not a list (got {'a': 1})"),
    (
        parse_ray_nodes,
        '[{"address": "a", "alive": 1, "resources": {}}]',
        "ray-nodes: [0].alive is not true or false (got 1)",
    ),
    (
        parse_ray_nodes,
        '[{"address": "a", "alive": true, "resources": {"node:a": "1"}}]',
        "ray-nodes: [0].resources['node:a'] is not a number (got '1')",
    ),
    (
        parse_ping,
        '{"tool": "builtin", "size": 1}',
        "net-probe ping: no samples (got keys ['size', 'tool'])",
    ),
    (parse_stream, "null", "net-probe stream: not an object (got None)"),
    (parse_setup, '{"nodes": {}}', "setup: nodes does not name one node (got [])"),
    (
        parse_setup,
        '{"nodes": {"n": {"steps": [{}], "reboot_needed": false, "applied": []}}}',
        "setup: no nodes['n'].steps[0].id (got keys [])",
    ),
    (parse_power, '{"readings": []}', "power: no warnings (got keys ['readings'])"),
    (
        parse_power,
        '{"readings": [{"source": "s", "tool": "rapl", "domain": "psys", "kind": "heat", '
        '"value": 1, "wrap_j": null}], "warnings": []}',
        "power: readings[0].kind is not 'power' or 'energy' (got 'heat')",
    ),
    (
        parse_power,
        '{"readings": [{"source": "s", "tool": "rapl", "domain": "psys", "kind": "energy", '
        '"value": -1, "wrap_j": null}], "warnings": []}',
        "power: readings[0].value is not a finite number >= 0 (got -1.0)",
    ),
    (
        parse_power,
        '{"readings": [{"source": "s", "tool": "rapl", "domain": "psys", "kind": "energy", '
        '"value": 1, "wrap_j": "big"}], "warnings": []}',
        "power: readings[0].wrap_j is not a number or null (got 'big')",
    ),
    (
        parse_power,
        '{"readings": [{"source": 7}], "warnings": []}',
        "power: readings[0].source is not a string (got 7)",
    ),
    (
        parse_power,
        '{"readings": [' + ", ".join(["{}"] * 300) + '], "warnings": []}',
        "power: readings has more than 256 (got 300)",
    ),
    (parse_node_info, '{"halo": "0.1"}', "node-info: no python (got keys ['halo'])"),
    (parse_node_info, "[" * 100_000, "node-info: not JSON (got '" + "[" * 59 + ")"),
    (
        parse_inventory,
        '{"hostname": "x"}',
        "inventory: not an inventory (ValueError: os is missing)",
    ),
]


@pytest.mark.parametrize(("parse", "text", "message"), GARBAGE)
def test_garbage_is_one_line(parse: Callable[[str], object], text: str, message: str) -> None:
    with pytest.raises(WireError) as refused:
        parse(text)
    assert str(refused.value) == message
    assert isinstance(refused.value, ValueError) and refused.value.exit_code == 1  # a ParseError


PARSERS = [
    parse_counters,
    parse_power,
    parse_serve_health,
    parse_serve_probe,
    parse_serve_tokens,
    parse_gguf_layers,
    parse_ray_nodes,
    parse_ping,
    parse_stream,
    parse_setup,
    parse_node_info,
    parse_inventory,
]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def _answered(parse: Callable[[str], Any], text: str) -> None:
    try:
        parse(text)
    except WireError as err:
        assert "\n" not in str(err) and str(err).split(":")[0] in str(err)


@settings(deadline=None)
@given(text=st.text(max_size=200) | JSON.map(json.dumps))
def test_any_answer_is_read_or_refused_in_one_line(text: str) -> None:
    for parse in PARSERS:
        _answered(parse, text)


@settings(deadline=None)
@given(
    value=st.fixed_dictionaries(
        {"paths": st.dictionaries(st.text(max_size=4), JSON, max_size=3), "warnings": JSON}
    )
    | st.lists(st.fixed_dictionaries({"address": JSON, "alive": JSON, "resources": JSON}))
    | st.fixed_dictionaries(
        {
            "readings": st.lists(
                st.fixed_dictionaries(
                    {k: JSON for k in ("source", "tool", "domain", "kind", "value", "wrap_j")}
                ),
                max_size=3,
            ),
            "warnings": JSON,
        }
    )
    | st.fixed_dictionaries({"nodes": st.dictionaries(st.text(max_size=4), JSON, max_size=2)})
    | st.fixed_dictionaries(
        {
            "model": JSON,
            "answers": st.lists(
                st.fixed_dictionaries(
                    {
                        "text": JSON,
                        "steps": st.lists(
                            st.fixed_dictionaries(
                                {"token": JSON, "id": JSON, "logprob": JSON, "top": JSON}
                            ),
                            max_size=3,
                        ),
                    }
                ),
                max_size=2,
            ),
        }
    )
)
def test_near_misses_are_read_or_refused_in_one_line(value: object) -> None:
    for parse in PARSERS:
        _answered(parse, json.dumps(value))
