"""The key gate (gateway/gate.py) as a real process in front of a real aiohttp upstream on
127.0.0.1: keys refused before the upstream sees anything, aliases rewritten, streams relayed
as they come, counts per key name written to the usage file, /v1/models answered from the
models file, 502 when the upstream is gone, SIGTERM honoured. Then its pure parts (and
meter.py's token counting) by table."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from halo_cluster.errors import StateError
from halo_cluster.gateway.gate import Watched, kept_headers, key_name, rewrite_model
from halo_cluster.gateway.keys import KeyUsage, add_key, hash_key, read_usage, revoke_key
from halo_cluster.gateway.meter import SseMeter, meter_for
from halo_cluster.gateway.models_file import ModelEntry, ModelsFile, parse_models

pytestmark = pytest.mark.unit

MODELS = ModelsFile(
    (
        ModelEntry("qwen3-8b", ("qwen", "default"), "vllm", 2),
        ModelEntry("llama-3b", (), "llama.cpp", 1),
    )
)
WORKER_KEY = "halo-worker-" + "w" * 43
DEADLINE_S = 10.0


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = DEADLINE_S) -> Any:
    """``check()``'s first true answer, polled until ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"gave up waiting for {what}")


# -- the upstream: an OpenAI-like server that records what reaches it -----------------------
@dataclass
class Upstream:
    seen: list[dict[str, Any]] = field(default_factory=list)
    reader_has_first: threading.Event = field(default_factory=threading.Event)
    last_sent_at: float = 0.0
    port: int = 0

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append({"path": request.path_qs, "headers": dict(request.headers), "body": body})
        if not body.get("stream"):
            usage = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
            return web.json_response(
                {"model": body["model"], "choices": [{"text": "hi"}], "usage": usage}
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for n in range(4):
            if n == 3 and body.get("hold_last"):  # the last event waits for the reader's first
                await asyncio.get_running_loop().run_in_executor(
                    None, self.reader_has_first.wait, 5.0
                )
                self.last_sent_at = time.monotonic()
            await response.write(_event({"choices": [{"index": 0, "text": f"t{n}"}]}))
            await asyncio.sleep(0.02)
        if body.get("stream_options", {}).get("include_usage"):
            await response.write(
                _event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})
            )
        await response.write(b"data: [DONE]\n\n")
        return response

    async def anything(self, request: web.Request) -> web.Response:
        self.seen.append(
            {
                "path": request.path_qs,
                "headers": dict(request.headers),
                "body": await request.text(),
            }
        )
        return web.json_response(
            {"method": request.method, "path": request.path_qs}, headers={"X-Upstream": "yes"}
        )


def _event(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    app = web.Application()
    app.router.add_post("/v1/completions", server.completions)
    app.router.add_route("*", "/{tail:.*}", server.anything)
    runner = web.AppRunner(app, access_log=None)

    async def start() -> int:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return int(runner.addresses[0][1])

    server.port = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield server
    finally:
        server.reader_has_first.set()
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


# -- the gate: a real process ----------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class GateRun:
    process: subprocess.Popen[bytes]
    port: int
    dir: Path
    keys: dict[str, str]

    @property
    def stderr(self) -> str:
        return (self.dir / "gate.err").read_text()

    def call(
        self,
        method: str,
        path: str,
        key: str | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=DEADLINE_S)
        try:
            connection.request(method, path, body=_body(body), headers=_headers(key, headers))
            answer = connection.getresponse()
            return answer.status, dict(answer.getheaders()), answer.read()
        finally:
            connection.close()


def _body(body: Any) -> bytes | None:
    return body if body is None or isinstance(body, bytes) else json.dumps(body).encode()


def _headers(key: str | None, extra: dict[str, str] | None) -> dict[str, str]:
    headers = dict(extra or {})
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def start_gate(tmp: Path, upstream_port: int, names: tuple[str, ...] = ("alice", "bob")) -> GateRun:
    tmp.mkdir(parents=True, exist_ok=True)
    keys = {name: add_key(tmp / "keys.json", name, 1.0) for name in names}
    (tmp / "models.json").write_text(MODELS.to_json())
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "halo_cluster.gateway.gate",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    argv += ["--upstream", f"http://127.0.0.1:{upstream_port}/", "--keys", str(tmp / "keys.json")]
    argv += ["--usage", str(tmp / "usage.json"), "--models", str(tmp / "models.json")]
    env = {**os.environ, "HALO_WORKER_KEY": WORKER_KEY}
    with open(tmp / "gate.err", "wb") as err:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env)
    run = GateRun(process, port, tmp, keys)
    try:
        wait_for(lambda: _healthy(run), "the gate's /health")
    except BaseException:
        stop(run)
        raise
    return run


def _healthy(run: GateRun) -> bool:
    if run.process.poll() is not None:
        raise AssertionError(f"the gate ended ({run.process.returncode}): {run.stderr}")
    try:
        return run.call("GET", "/health")[0] == 200
    except OSError:
        return False


def stop(run: GateRun) -> None:
    if run.process.poll() is None:
        run.process.kill()
    run.process.wait(DEADLINE_S)


@pytest.fixture(scope="module")
def gate(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GateRun]:
    run = start_gate(tmp_path_factory.mktemp("gate"), upstream.port, ("alice", "bob", "dave"))
    try:
        yield run
    finally:
        stop(run)


@pytest.fixture
def own_gate(upstream: Upstream, tmp_path: Path) -> Iterator[GateRun]:
    """A gate of the test's own (its counts start from zero; it may be stopped)."""
    run = start_gate(tmp_path, upstream.port, ("carol",))
    try:
        yield run
    finally:
        stop(run)


def test_health_needs_no_key(gate: GateRun) -> None:
    status, _, body = gate.call("GET", "/health")
    assert (status, json.loads(body)) == (200, {"status": "ok"})


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer halo-not-a-key", "Bearer ", "Basic YWxpY2U6cHc=", "halo-xyz"],
)
def test_refused_without_a_valid_key(
    gate: GateRun, upstream: Upstream, authorization: str | None
) -> None:
    before = len(upstream.seen)
    headers = {} if authorization is None else {"Authorization": authorization}
    for method, path in (("POST", "/v1/completions"), ("GET", "/v1/models"), ("GET", "/anything")):
        status, _, body = gate.call(method, path, body={"model": "qwen"}, headers=headers)
        assert status == 401
        error = json.loads(body)["error"]
        assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_api_key")
    assert len(upstream.seen) == before


def test_a_key_passes_without_its_authorization_but_with_the_worker_key(
    gate: GateRun, upstream: Upstream
) -> None:
    body = {"model": "llama-3b", "prompt": "hello"}
    status, headers, answer = gate.call("POST", "/v1/completions?x=1", gate.keys["alice"], body)
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert json.loads(answer)["usage"]["completion_tokens"] == 7
    seen = upstream.seen[-1]
    assert (seen["path"], seen["body"]) == ("/v1/completions?x=1", body)
    assert seen["headers"]["Authorization"] == f"Bearer {WORKER_KEY}"
    assert gate.keys["alice"] not in json.dumps(seen["headers"])
    assert seen["headers"]["Host"] == f"127.0.0.1:{upstream.port}"


def test_other_paths_and_methods_are_forwarded(gate: GateRun, upstream: Upstream) -> None:
    status, headers, answer = gate.call(
        "DELETE", "/v2/thing?a=b%20c", gate.keys["bob"], headers={"X-Client": "1"}
    )
    assert (status, json.loads(answer)) == (200, {"method": "DELETE", "path": "/v2/thing?a=b%20c"})
    assert headers["X-Upstream"] == "yes"
    assert upstream.seen[-1]["headers"]["X-Client"] == "1"


def test_an_alias_reaches_the_upstream_as_its_id(gate: GateRun, upstream: Upstream) -> None:
    status, _, answer = gate.call(
        "POST", "/v1/completions", gate.keys["alice"], {"model": "qwen", "prompt": "x"}
    )
    assert status == 200 and json.loads(answer)["model"] == "qwen3-8b"
    assert upstream.seen[-1]["body"] == {"model": "qwen3-8b", "prompt": "x"}


def test_a_stream_arrives_as_it_is_sent(gate: GateRun, upstream: Upstream) -> None:
    upstream.reader_has_first.clear()
    connection = http.client.HTTPConnection("127.0.0.1", gate.port, timeout=DEADLINE_S)
    body = {"model": "qwen3-8b", "prompt": "x", "stream": True, "hold_last": True}
    connection.request(
        "POST", "/v1/completions", json.dumps(body), _headers(gate.keys["alice"], None)
    )
    answer = connection.getresponse()
    assert answer.status == 200 and answer.getheader("Content-Type", "").startswith(
        "text/event-stream"
    )
    first = answer.readline()
    first_at = time.monotonic()
    upstream.reader_has_first.set()
    rest = answer.read()
    connection.close()
    assert first.startswith(b"data: ") and json.loads(first[6:])["choices"][0]["text"] == "t0"
    assert first_at < upstream.last_sent_at  # the first event came before the last was sent
    assert rest.count(b"data: ") == 4 and rest.endswith(b"data: [DONE]\n\n")


def test_models_lists_ids_and_aliases(gate: GateRun, upstream: Upstream) -> None:
    before = len(upstream.seen)
    status, _, answer = gate.call("GET", "/v1/models", gate.keys["bob"])
    assert status == 200
    assert json.loads(answer) == {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "halo"}
            for name in ("qwen3-8b", "qwen", "default", "llama-3b")
        ],
    }
    assert len(upstream.seen) == before


def test_a_revoked_key_is_refused_within_a_second(gate: GateRun, upstream: Upstream) -> None:
    dave = gate.keys["dave"]
    assert gate.call("GET", "/v1/models", dave)[0] == 200
    revoke_key(gate.dir / "keys.json", "dave", 3.0)
    revoked_at = time.monotonic()
    wait_for(lambda: gate.call("GET", "/v1/models", dave)[0] == 401, "a revoked key refused", 3.0)
    assert time.monotonic() - revoked_at < 2.5
    before = len(upstream.seen)
    assert gate.call("POST", "/v1/completions", dave, {"model": "qwen"})[0] == 401
    assert len(upstream.seen) == before
    assert gate.call("GET", "/v1/models", gate.keys["bob"])[0] == 200  # the others stay


def put(path: Path, text: str) -> None:
    """``text`` into ``path`` at once, as halo writes the gate's files (the gate must not
    catch one half written)."""
    path.with_suffix(".tmp").write_text(text)
    path.with_suffix(".tmp").replace(path)


def listed(gate: GateRun) -> list[str]:
    status, _, answer = gate.call("GET", "/v1/models", gate.keys["alice"])  # looks again
    assert status == 200
    return [model["id"] for model in json.loads(answer)["data"]]


def test_garbage_files_later_keep_the_last_good_ones(gate: GateRun) -> None:
    models, keys = gate.dir / "models.json", gate.dir / "keys.json"
    good_keys = keys.read_text()
    put(models, "{garbage")
    put(keys, "[garbage")
    try:

        def both_noticed() -> bool:
            assert len(listed(gate)) == 4  # alice's key still lets in, the models stay
            return gate.stderr.count("the last good one stays in force") == 2

        wait_for(both_noticed, "one line each logged")
    finally:
        put(keys, good_keys)
        put(models, MODELS.to_json())


def test_a_changed_models_file_is_read_again(gate: GateRun, upstream: Upstream) -> None:
    models = gate.dir / "models.json"
    put(models, ModelsFile((*MODELS.models, ModelEntry("phi-4", ("phi",)))).to_json())
    try:
        wait_for(lambda: "phi" in listed(gate), "the new alias listed")
        gate.call("POST", "/v1/completions", gate.keys["alice"], {"model": "phi"})
        assert upstream.seen[-1]["body"] == {"model": "phi-4"}
    finally:
        put(models, MODELS.to_json())


def test_a_body_over_32_mib_is_413(gate: GateRun, upstream: Upstream) -> None:
    before = len(upstream.seen)
    status, _, answer = gate.call(
        "POST", "/v1/completions", gate.keys["bob"], b"x" * (32 * 1024 * 1024 + 1)
    )
    assert status == 413 and json.loads(answer)["error"]["code"] == "request_too_large"
    assert len(upstream.seen) == before


def test_log_lines_name_the_key_never_show_it(gate: GateRun) -> None:
    gate.call("GET", "/v1/models?api_key=secret", gate.keys["alice"])
    line = wait_for(
        lambda: [x for x in gate.stderr.splitlines() if "GET /v1/models 200" in x], "a log line"
    )[-1]
    assert "key=alice GET /v1/models 200" in line and line.endswith("ms")
    assert "secret" not in gate.stderr
    assert not any(key in gate.stderr for key in gate.keys.values())
    assert WORKER_KEY not in gate.stderr


def test_usage_counted_per_key_and_written_on_sigterm(
    own_gate: GateRun, upstream: Upstream
) -> None:
    key = own_gate.keys["carol"]
    own_gate.call("POST", "/v1/completions", key, {"model": "qwen", "prompt": "x"})  # JSON: 5 + 7
    own_gate.call("POST", "/v1/completions", key, {"model": "qwen", "stream": True})  # 4 events
    own_gate.call("GET", "/v1/models", None)  # refused
    usage = own_gate.dir / "usage.json"
    expected = KeyUsage(requests=2, prompt_tokens=5, completion_tokens=11)
    wait_for(
        lambda: usage.exists() and read_usage(usage).keys.get("carol") == expected, "usage written"
    )
    assert read_usage(usage).anonymous_refused == 1
    assert (usage.stat().st_mode & 0o777) == 0o600

    streamed = {"model": "qwen", "stream": True, "stream_options": {"include_usage": True}}
    own_gate.call("POST", "/v1/completions", key, streamed)  # its usage: 3 + 4
    own_gate.process.send_signal(signal.SIGTERM)
    assert own_gate.process.wait(DEADLINE_S) == 0
    assert read_usage(usage).keys["carol"] == KeyUsage(
        requests=3, prompt_tokens=8, completion_tokens=15
    )
    assert key not in usage.read_text()


def test_upstream_down_is_502(tmp_path: Path) -> None:
    run = start_gate(tmp_path, free_port(), ("erin",))
    try:
        status, _, answer = run.call("POST", "/v1/completions", run.keys["erin"], {"model": "qwen"})
        assert status == 502
        error = json.loads(answer)["error"]
        assert set(error) == {"message", "type", "code"} and error["code"] == "upstream_unreachable"
    finally:
        stop(run)


def run_gate_once(tmp: Path, port: int) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "halo_cluster.gateway.gate", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--upstream", "http://127.0.0.1:9"]
    argv += ["--keys", str(tmp / "keys.json"), "--usage", str(tmp / "usage.json")]
    argv += ["--models", str(tmp / "models.json")]
    return subprocess.run(argv, capture_output=True, text=True, timeout=DEADLINE_S)


@pytest.mark.parametrize(
    ("broken", "content", "says"),
    [
        ("keys", "not json", "keys.json: not a halo.gateway_keys/1 key file"),
        ("models", "not json", "models.json: not a models file halo wrote"),
        ("usage", "not json", "usage.json: not a halo.gateway_usage/1 usage file"),
        ("keys", None, "keys.json: no key file; make a key first"),
        ("models", None, "models.json: No such file or directory"),
    ],
)
def test_a_bad_file_at_start_is_one_line_and_exit_2(
    tmp_path: Path, broken: str, content: str | None, says: str
) -> None:
    add_key(tmp_path / "keys.json", "frank", 1.0)
    (tmp_path / "models.json").write_text(MODELS.to_json())
    if content is None:
        (tmp_path / f"{broken}.json").unlink()
    else:
        (tmp_path / f"{broken}.json").write_text(content)
    done = run_gate_once(tmp_path, free_port())
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert says in done.stderr


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    add_key(tmp_path / "keys.json", "frank", 1.0)
    (tmp_path / "models.json").write_text(MODELS.to_json())
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        done = run_gate_once(tmp_path, busy.getsockname()[1])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith("halo gate: cannot listen on 127.0.0.1:")


def test_the_module_imports_without_aiohttp() -> None:
    code = "import sys; sys.modules['aiohttp'] = None; import halo_cluster.gateway.gate as g; print(g.RELOAD_INTERVAL_S)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=DEADLINE_S
    )
    assert (done.returncode, done.stdout) == (0, "1.0\n"), done.stderr


# -- the pure parts ----------------------------------------------------------------------------
def test_key_name() -> None:
    hashes = {hash_key("halo-abc"): "alice"}
    assert key_name("Bearer halo-abc", hashes) == "alice"
    assert key_name("bearer  halo-abc ", hashes) == "alice"
    for header in (None, "", "Bearer", "Bearer halo-abd", "Token halo-abc", "halo-abc"):
        assert key_name(header, hashes) is None


def test_sse_meter_counts_events_or_takes_the_last_usage() -> None:
    meter = SseMeter()
    stream = b"".join(
        [
            b'data: {"choices": [{"text": "a"}]}\n\n',
            b'data: {"choices": [{"delta": {"content": "b"}}]}\r\n\r\n',
            b'data: {"choices": [{"delta": {"role": "assistant"}}]}\n\n',  # no text: not counted
            b": a comment\n\nevent: x\n",
            b'data: {"choices": [{"text": "c"}]}',  # the last line has no newline
        ]
    )
    for n in range(0, len(stream), 7):  # cut anywhere
        meter.feed(stream[n : n + 7])
    assert meter.tokens() == (0, 3)

    with_usage = SseMeter()
    with_usage.feed(
        b'data: {"choices": [{"text": "a"}], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}\n\n'
    )
    with_usage.feed(
        b'data: {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 9}}\n\ndata: [DONE]\n\n'
    )
    assert with_usage.tokens() == (2, 9)


def test_sse_meter_keeps_no_long_line() -> None:
    meter = SseMeter()
    meter.feed(b'data: {"choices": [{"text": "' + b"x" * 100_000)
    assert len(meter._line) == 0
    meter.feed(b'"}]}\ndata: {"choices": [{"text": "y"}]}\n')
    assert meter.tokens() == (0, 1)


def test_meters_by_content_type() -> None:
    json_meter = meter_for("application/json; charset=utf-8")
    json_meter.feed(b'{"usage": {"prompt_tokens": 4, "completion_tokens": 6}}')
    assert json_meter.tokens() == (4, 6)
    other = meter_for("text/plain")
    other.feed(b'{"usage": {"prompt_tokens": 4, "completion_tokens": 6}}')
    assert other.tokens() == (0, 0)


def test_kept_headers() -> None:
    items = [
        ("Host", "h"),
        ("Authorization", "Bearer k"),
        ("Connection", "keep-alive, X-Hop"),
        ("X-Hop", "1"),
        ("Transfer-Encoding", "chunked"),
        ("Content-Type", "application/json"),
        ("X-Many", "1"),
        ("X-Many", "2"),
    ]
    drop = frozenset({"connection", "transfer-encoding", "host", "authorization"})
    assert kept_headers(items, drop) == [
        ("Content-Type", "application/json"),
        ("X-Many", "1"),
        ("X-Many", "2"),
    ]


def test_rewrite_model() -> None:
    aliases = MODELS.aliases()
    assert json.loads(rewrite_model(b'{"model": "qwen", "n": 1}', aliases)) == {
        "model": "qwen3-8b",
        "n": 1,
    }
    for body in (b'{"model": "llama-3b"}', b'{"model": 3}', b"not json", b"", b'["model"]'):
        assert rewrite_model(body, aliases) == body


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "not JSON"),
        ('{"schema": "halo.gateway_models/2", "models": []}', "of schema halo.gateway_models/1"),
        ('{"schema": "halo.gateway_models/1"}', "'models' is not a list"),
        (
            '{"schema": "halo.gateway_models/1", "models": [{"aliases": []}]}',
            "a model without an id",
        ),
        (
            '{"schema": "halo.gateway_models/1", "models": [{"id": "a", "aliases": "b"}]}',
            "'aliases' is not a list",
        ),
        (
            '{"schema": "halo.gateway_models/1", "models": [{"id": "a", "replicas": -1}]}',
            "'replicas' is not a count",
        ),
        (
            '{"schema": "halo.gateway_models/1", "models": [{"id": "a", "aliases": ["x"]}, {"id": "b", "aliases": ["x"]}]}',
            "'x' names two models",
        ),
    ],
)
def test_garbage_models_file_is_one_line(text: str, reason: str) -> None:
    with pytest.raises(StateError) as bad:
        parse_models(text, "models.json")
    assert "\n" not in str(bad.value) and reason in str(bad.value)


def test_models_round_trip() -> None:
    assert parse_models(MODELS.to_json()) == MODELS


def test_watched_reads_again_at_most_once_per_interval(tmp_path: Path) -> None:
    path, now = tmp_path / "f", [0.0]
    path.write_text("one")
    watched = Watched(path, lambda p: p.read_text(), 1.0, lambda: now[0])
    path.write_text("two!")
    now[0] = 0.5
    assert watched.get() == "one"
    now[0] = 1.0
    assert watched.get() == "two!"
