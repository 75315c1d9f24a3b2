"""The gateway's surfaces as an attacker or a careless user meets them: the key gate (a real
process, its timers shortened, in front of a real aiohttp upstream) sent odd Authorization
headers, bytes its HTTP parser refuses, hostile paths, odd bodies, clients that never finish
sending or leave mid-answer; the key, usage and models files as garbage, devices and FIFOs;
``halo gateway`` with bad names, a garbage key file, a bad [gateway] table and a head that
does not answer; the state file's deployments as garbage. Each is a status or one line:
nothing reaches the upstream without a valid key, no traceback, no key in a log line, and
the gate keeps serving the others."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from halo_cluster.cluster.deployments import parse_deployments
from halo_cluster.cluster.handle import Cluster
from halo_cluster.cluster.state import read_state, state_path
from halo_cluster.config import Config, NodeConfig
from halo_cluster.errors import StateError, UsageError
from halo_cluster.gateway import gate as gate_module
from halo_cluster.gateway.gate import OneLine, key_name, path_problem, rewrite_model
from halo_cluster.gateway.keys import (
    add_key,
    check_name,
    hash_key,
    parse_keys,
    read_keys,
    read_usage,
)
from halo_cluster.gateway.meter import meter_for, usage_pair
from halo_cluster.gateway.models_file import ModelEntry, ModelsFile, read_models
from tests.conftest import halo_here

pytestmark = pytest.mark.unit

DEADLINE_S = 10.0
HEAD_TIMEOUT_S = 1.0  # the gate's timers, shortened for this module's gate
BODY_IDLE_S = 0.5
MODELS = ModelsFile((ModelEntry("qwen3-8b", ("qwen",)),))


# -- a tiny upstream that records what reaches it ---------------------------------------------
@dataclass
class Upstream:
    seen: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0

    async def anything(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append({"path": request.path_qs, "headers": dict(request.headers), "body": body})
        if request.path != "/stream":
            return web.json_response({"path": request.path_qs})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            for _ in range(100):
                await response.write(b'data: {"choices": [{"text": "x"}]}\n\n')
                await asyncio.sleep(0.01)
        except ConnectionError:
            pass
        return response


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.anything)
    runner = web.AppRunner(app, access_log=None)

    async def start() -> int:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return int(runner.addresses[0][1])

    server.port = asyncio.run_coroutine_threadsafe(start(), loop).result(DEADLINE_S)
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(DEADLINE_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(DEADLINE_S)
        loop.close()


# -- the gate: a real process, its timers shortened -------------------------------------------
@dataclass
class GateRun:
    process: subprocess.Popen[bytes]
    port: int
    dir: Path
    key: str

    @property
    def stderr(self) -> str:
        return (self.dir / "gate.err").read_text(errors="replace")

    def send(self, data: bytes, timeout: float = DEADLINE_S) -> bytes:
        """``data`` on a new connection; what comes back until the gate closes it."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as conn:
            conn.sendall(data)
            return read_all(conn)

    def status(self, data: bytes) -> int:
        """The status the gate answers ``data`` with (read as soon as it comes: after an
        answer to a request whose body it did not read, aiohttp lingers a while)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=DEADLINE_S) as conn:
            conn.sendall(data)
            return status_of(conn)


def read_all(conn: socket.socket) -> bytes:
    out = b""
    while chunk := conn.recv(65536):
        out += chunk
    return out


def status_of(conn: socket.socket) -> int:
    out = b""
    while b"\r\n" not in out and (chunk := conn.recv(1)):
        out += chunk
    return int(out.split(b" ", 2)[1])


def request(
    method: str, target: str, headers: tuple[tuple[str, str], ...] = (), body: bytes = b""
) -> bytes:
    head = f"{method} {target} HTTP/1.1\r\nHost: gate\r\nConnection: close\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers)
    if body and not any(name.lower() == "transfer-encoding" for name, _ in headers):
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def gate(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GateRun]:
    tmp = tmp_path_factory.mktemp("hostile")
    key = add_key(tmp / "keys.json", "alice", 1.0)
    (tmp / "models.json").write_text(MODELS.to_json())
    port = free_port()
    shorten = f"g.HEAD_TIMEOUT_S = {HEAD_TIMEOUT_S}; g.BODY_IDLE_S = {BODY_IDLE_S}"
    code = f"import sys, halo_cluster.gateway.gate as g; {shorten}; sys.exit(g.main())"
    argv = [sys.executable, "-c", code, "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--upstream", f"http://127.0.0.1:{upstream.port}", "--keys", str(tmp / "keys.json")]
    argv += ["--usage", str(tmp / "usage.json"), "--models", str(tmp / "models.json")]
    with open(tmp / "gate.err", "wb") as err:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
    run = GateRun(process, port, tmp, key)
    try:
        end = time.monotonic() + DEADLINE_S
        while not _answers(run):
            assert process.poll() is None and time.monotonic() < end, run.stderr
            time.sleep(0.05)
        yield run
    finally:
        process.kill()
        process.wait(DEADLINE_S)


def _answers(run: GateRun) -> bool:
    try:
        return run.status(request("GET", "/health")) == 200
    except OSError:
        return False


def clean(run: GateRun) -> None:
    """The gate still serves, and its log has no traceback and no key."""
    assert run.status(request("GET", "/v1/models", (("Authorization", f"Bearer {run.key}"),)))
    assert run.process.poll() is None
    log = run.stderr
    assert "Traceback" not in log and run.key not in log and run.key[5:] not in log
    assert all(line[:2] == "20" for line in log.splitlines()), log  # one line per record


def bearer(run: GateRun) -> tuple[str, str]:
    return ("Authorization", f"Bearer {run.key}")


# -- the gate --------------------------------------------------------------------------------
def test_health_without_a_key_and_every_other_method_with_one(
    gate: GateRun, upstream: Upstream
) -> None:
    before = len(upstream.seen)
    assert gate.status(request("GET", "/health")) == 200
    assert gate.status(request("GET", "/health", (("Authorization", "Bearer nope"),))) == 200
    assert gate.status(request("HEAD", "/health")) == 200
    assert gate.status(request("GET", "/health?x=1")) == 200
    for method, path in (("OPTIONS", "/v1/models"), ("HEAD", "/v1/x"), ("GET", "/HEALTH")):
        assert gate.status(request(method, path)) == 401
    assert gate.status(request("GET", "/health/../v1/models")) == 401
    assert gate.status(request("GET", "http://elsewhere/v1/models")) == 401  # absolute form
    assert len(upstream.seen) == before
    assert gate.status(request("HEAD", "/v1/x", (bearer(gate),))) == 200
    assert upstream.seen[-1]["path"] == "/v1/x"
    clean(gate)


@pytest.mark.parametrize(
    "value",
    [
        b"Bearer \xff\xfe",  # not UTF-8: aiohttp hands it over as surrogates (was a 500)
        b"Bearer \xed\xa0\x80",  # a UTF-8 surrogate
        "Bearer héllo☃".encode(),
        b"Bearer " + b"a" * 8000,
        b"Basic YWxpY2U6cHc=",
        b"Bearer\thalo-x",
        b"Bearer KEY extra",
        b"KEY",
        b"Bearer KEY%0A",
    ],
)
def test_an_odd_authorization_is_401(gate: GateRun, upstream: Upstream, value: bytes) -> None:
    before = len(upstream.seen)
    header = value.replace(b"KEY", gate.key.encode())
    data = request("POST", "/v1/completions", body=b'{"model": "qwen"}')
    data = data.replace(b"\r\n\r\n", b"\r\nAuthorization: " + header + b"\r\n\r\n", 1)
    assert gate.status(data) == 401
    assert len(upstream.seen) == before
    clean(gate)


def test_a_key_with_spacing_or_a_lower_case_scheme_passes(gate: GateRun) -> None:
    for value in (f"bearer {gate.key}", f"Bearer    {gate.key}   ", f"  Bearer {gate.key}"):
        assert gate.status(request("GET", "/v1/x", (("Authorization", value),))) == 200


@pytest.mark.parametrize(
    "tail",
    [b"\x01", b"\r", b"\x0b", b"\x00", b"\r\n continued", b"\n"],
    ids=["ctrl", "cr", "vt", "nul", "obs-fold", "bare-lf"],
)
def test_bytes_the_parser_refuses_are_400_and_the_key_stays_out_of_the_log(
    gate: GateRun, upstream: Upstream, tail: bytes
) -> None:
    """aiohttp quotes the line it refused in its log, the key with it: one line without it."""
    before = len(upstream.seen)
    data = b"GET /v1/x HTTP/1.1\r\nHost: g\r\nAuthorization: Bearer " + gate.key.encode() + tail
    assert gate.status(data + b"\r\n\r\n") == 400
    assert len(upstream.seen) == before
    assert "Error handling request from 127.0.0.1: BadHttpMessage" in gate.stderr
    clean(gate)


def test_huge_or_many_headers_are_400(gate: GateRun, upstream: Upstream) -> None:
    before = len(upstream.seen)
    assert gate.status(request("GET", "/v1/x", (bearer(gate), ("X-Big", "a" * 100_000)))) == 400
    many = tuple((f"X-{n}", "v") for n in range(300))
    assert gate.status(request("GET", "/v1/x", (bearer(gate), *many))) == 400
    assert gate.status(request("GET", "/v1/x", (("Authorization", "Bearer " + "k" * 9000),))) == 400
    assert len(upstream.seen) == before
    clean(gate)


@pytest.mark.parametrize(
    ("target", "status"),
    [
        ("/../../etc/passwd", 400),
        ("/v1/%2e%2e/workers", 400),
        ("/v1/./models", 400),
        ("/v1/models%00", 400),
        ("/v1/x%0Ay", 400),
        ("/workers", 403),  # the router's control API: a client could add its own replica
        ("/workers/http%3A%2F%2Fnode1%3A8000", 403),
        ("/add_worker?url=http://evil:1", 403),
        ("/%77orkers", 403),
        ("//remove_worker", 403),
        ("/Flush_Cache", 403),
    ],
)
def test_a_hostile_path_never_reaches_the_upstream(
    gate: GateRun, upstream: Upstream, target: str, status: int
) -> None:
    before = len(upstream.seen)
    assert gate.status(request("POST", target, (bearer(gate),), b"{}")) == status
    assert len(upstream.seen) == before
    clean(gate)


def test_an_absolute_form_target_goes_to_the_upstream_only(
    gate: GateRun, upstream: Upstream
) -> None:
    assert gate.status(request("GET", "http://evil.example:1/v1/x?y=1", (bearer(gate),))) == 200
    seen = upstream.seen[-1]
    assert (seen["path"], seen["headers"]["Host"]) == ("/v1/x?y=1", f"127.0.0.1:{upstream.port}")


def test_odd_bodies(gate: GateRun, upstream: Upstream) -> None:
    key = (bearer(gate),)
    for body in (b"{not json", b'{"model": 5}', b'{"model": ["qwen"]}', b"\xff\xfe"):
        assert gate.status(request("POST", "/v1/completions", key, body)) == 200
        assert upstream.seen[-1]["body"] == body  # as it came: only an alias is rewritten
    chunked = (*key, ("Transfer-Encoding", "chunked"))
    body = b'7\r\n{"model\r\n9\r\n": "qwen"\r\n1\r\n}\r\n0\r\n\r\n'
    assert gate.status(request("POST", "/v1/completions", chunked, body)) == 200
    assert json.loads(upstream.seen[-1]["body"]) == {"model": "qwen3-8b"}
    before = len(upstream.seen)
    gzipped = (*key, ("Content-Encoding", "gzip"))
    answer = gate.send(request("POST", "/v1/completions", gzipped, gzip.compress(b"{}")))
    assert answer.startswith(b"HTTP/1.1 415") and b"unsupported_encoding" in answer
    claims = (*key, ("Content-Length", str(1 << 40)))
    assert gate.status(request("POST", "/v1/completions", claims)) == 413
    assert gate.status(request("POST", "/v1/completions", chunked, b"zz\r\n")) == 400
    assert len(upstream.seen) == before
    clean(gate)


def test_clients_that_never_finish_sending_do_not_hang_the_others(
    gate: GateRun, upstream: Upstream
) -> None:
    heads, bodies = [], []
    started = time.monotonic()
    for _ in range(40):
        heads.append(socket.create_connection(("127.0.0.1", gate.port), timeout=DEADLINE_S))
        heads[-1].sendall(b"POST /v1/completions HTTP/1.1\r\nHost: g\r\nAuthori")
    for _ in range(20):
        bodies.append(socket.create_connection(("127.0.0.1", gate.port), timeout=DEADLINE_S))
        bodies[-1].sendall(request("POST", "/v1/completions", (bearer(gate),), b"{" * 100)[:-90])
    try:
        took = time.monotonic()
        assert gate.status(request("GET", "/v1/x", (bearer(gate),))) == 200
        assert time.monotonic() - took < 1.0
        for conn in bodies:  # each answered once its body stopped coming
            assert status_of(conn) == 408
        for conn in heads:  # each closed once its head did not come
            assert read_all(conn) == b""
        assert time.monotonic() - started < HEAD_TIMEOUT_S + 3
    finally:
        for conn in heads + bodies:
            conn.close()
    clean(gate)


def test_a_malformed_later_chunk_is_a_408_not_a_hang(gate: GateRun, upstream: Upstream) -> None:
    """aiohttp leaves the body's reader waiting after a bad chunk that comes later."""
    before = len(upstream.seen)
    chunked = (bearer(gate), ("Transfer-Encoding", "chunked"))
    with socket.create_connection(("127.0.0.1", gate.port), timeout=DEADLINE_S) as conn:
        conn.sendall(request("POST", "/v1/completions", chunked, b"5\r\nhello\r\n"))
        time.sleep(0.1)
        conn.sendall(b"zz\r\nxx\r\n0\r\n\r\n")
        assert status_of(conn) == 408
    assert len(upstream.seen) == before
    clean(gate)


def test_clients_that_leave_mid_answer_or_mid_body(gate: GateRun, upstream: Upstream) -> None:
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", gate.port), timeout=DEADLINE_S) as conn:
            conn.sendall(request("GET", "/stream", (bearer(gate),)))
            assert conn.recv(200).startswith(b"HTTP/1.1 200")
        with socket.create_connection(("127.0.0.1", gate.port), timeout=DEADLINE_S) as conn:
            conn.sendall(request("POST", "/v1/completions", (bearer(gate),), b"x" * 100)[:-50])
    end = time.monotonic() + DEADLINE_S
    while gate.stderr.count("the answer was cut") < 3 or gate.stderr.count(" 400 ") < 3:
        assert time.monotonic() < end, gate.stderr
        time.sleep(0.05)
    clean(gate)


# -- the gate's pure parts -------------------------------------------------------------------
def test_key_name_refuses_what_no_key_is() -> None:
    hashes = {hash_key("halo-abc"): "alice"}
    assert key_name("Bearer halo-abc", hashes) == "alice"
    for header in ("Bearer halo-abc\udcff", "Bearer h\u00e9", "Bearer " + "a" * 600):
        assert key_name(header, hashes) is None


def test_path_problem() -> None:
    assert path_problem("/v1/chat/completions") is None
    assert path_problem("/v2/workersx") is None
    assert path_problem("/v1/workers") is None  # only the router's own first segment
    assert path_problem("/a/../b") == (
        400,
        "the path has a '.' or '..' segment or a control character",
        "bad_path",
    )
    assert path_problem("/list_workers")[:1] == (403,)  # type: ignore[index]


def test_rewrite_model_parses_only_what_names_an_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 32 MiB body of token ids takes seconds to parse: one that names no alias is not."""
    aliases = {"qwen": "qwen3-8b"}
    prompt = b"[" + b"1," * 200_000 + b"1]"
    with monkeypatch.context() as patched:
        patched.setattr(gate_module, "loads", lambda _: pytest.fail("parsed"))
        body = b'{"model": "llama", "prompt": ' + prompt + b"}"
        assert rewrite_model(body, aliases) is body
    big = b'{"model" : "qwen", "prompt": ' + prompt + b"}"
    assert rewrite_model(big, aliases) == b'{"model": "qwen3-8b", "prompt": ' + prompt + b"}"
    nested = b'{"model": "qwen", "m": {"model": "qwen"}}'
    assert json.loads(rewrite_model(nested, aliases)) == {
        "model": "qwen3-8b",
        "m": {"model": "qwen"},
    }


def test_one_line_keeps_the_request_bytes_out() -> None:
    secret = "halo-secret-key"
    err = BadHttpMessage(f"Invalid header value char:\n\n  b'Authorization: Bearer {secret}\\x01'")
    try:
        raise err
    except BadHttpMessage:
        record = logging.LogRecord(
            "aiohttp.server", logging.ERROR, __file__, 1, "Error from %s", ("1.2.3.4",),
            sys.exc_info(),
        )  # fmt: skip
    assert OneLine().filter(record)
    line = logging.Formatter("%(message)s").format(record)
    assert line == "Error from 1.2.3.4: BadHttpMessage (Invalid header value char)"
    python_parser = BadHttpMessage(f"Invalid HTTP header: b'Bearer {secret}'")
    record.exc_info, record.msg, record.args = (BadHttpMessage, python_parser, None), "x", ()
    OneLine().filter(record)
    assert secret not in logging.Formatter("%(message)s").format(record)


def test_an_implausible_token_count_is_not_counted() -> None:
    """Summed into the usage file, it would make a file the gate refuses at its next start."""
    assert usage_pair({"prompt_tokens": (1 << 64) - 1, "completion_tokens": 1}) is None
    meter = meter_for("application/json")
    meter.feed(b'{"usage": {"prompt_tokens": 3, "completion_tokens": 18446744073709551615}}')
    assert meter.tokens() == (0, 0)
    assert usage_pair({"prompt_tokens": 3, "completion_tokens": 4}) == (3, 4)


# -- the files -------------------------------------------------------------------------------
GOOD_KEY = {"name": "a", "sha256": "0" * 64, "created": 1}


def _keys(*records: dict[str, Any]) -> str:
    return json.dumps({"schema": "halo.gateway_keys/1", "keys": list(records)})


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("[" * 5000 + "]" * 5000, "nested deeper than 100 levels"),
        (_keys(GOOD_KEY)[:40], "not JSON"),
        ("\x00\xff garbage", "not JSON"),
        (" " * (2 << 20), "larger than 1 MiB"),
        ('{"schema": "' + "x" * 100_000 + '"}', "its schema is"),
    ],
)
def test_garbage_files_are_one_line(tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "f.json"
    path.write_text(content, errors="surrogateescape")
    for read in (read_keys, read_usage, read_models):
        with pytest.raises(StateError) as bad:
            read(path)
        message = str(bad.value)
        assert "\n" not in message and len(message) < 300
        assert says in message or "not a JSON object of schema" in message


def test_devices_fifos_and_directories_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "zero").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for name, says in (
        ("zero", "a character device, not a regular file"),
        ("fifo", "a FIFO, not a regular file"),
        ("dir", "a directory, not a regular file"),
        ("loop", "Too many levels of symbolic links"),
    ):
        for read in (read_keys, read_usage, read_models):
            with pytest.raises(StateError, match=says):
                read(tmp_path / name)
        with pytest.raises(StateError, match=says):
            add_key(tmp_path / name, "bob", 1.0)


def test_one_key_under_two_names_is_refused() -> None:
    """Revoking one name would leave the key working under the other."""
    with pytest.raises(StateError, match=r"keys a and b have the same SHA-256"):
        parse_keys(_keys(GOOD_KEY, {**GOOD_KEY, "name": "b"}))
    revoked = {**GOOD_KEY, "name": "b", "revoked": 2}
    assert len(parse_keys(_keys(GOOD_KEY, revoked)).keys) == 2


@pytest.mark.parametrize("name", ["", "a" * 65, "../x", "héllo", "-x", ".", "..", "a b", "a/b"])
def test_a_bad_key_name_is_one_line(name: str) -> None:
    with pytest.raises(UsageError, match="cannot name a key") as bad:
        check_name(name)
    assert "\n" not in str(bad.value)


# -- the command line ------------------------------------------------------------------------
TOML = '[cluster]\nname = "s"\n\n[[node]]\nname = "a"\nssh = "root@198.18.250.1"\n'
UNREACHABLE = "ssh: connect to host 198.18.250.1 port 22: Connection timed out"


@pytest.fixture
def unreachable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A halo.toml whose head never answers (at once: a fake runner, not SSH's wait)."""
    from halo_cluster.cli import cluster as cli_cluster
    from halo_cluster.cli.options import require_config
    from halo_cluster.client.node import NodeClient
    from halo_cluster.runner.fake import FakeRunner
    from halo_cluster.runner.result import Result

    path = tmp_path / "halo.toml"
    path.write_text(TOML)

    def handle(config_path: str | None, quiet: bool) -> Cluster:
        config = require_config(config_path)
        runner = FakeRunner().on((), lambda argv: Result(argv, 255, "", UNREACHABLE))
        return Cluster(config, {n.name: NodeClient(n, runner) for n in config.nodes})

    monkeypatch.setattr(cli_cluster, "cluster_handle", handle)
    return path


def test_a_head_that_does_not_answer_is_one_line_and_nothing_done_is_lost(
    unreachable: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(unreachable)
    code, out, err = halo_here(capsys, "gateway", "key", "add", "--config", config, "alice")
    key = out.strip()
    assert code == 1 and key.startswith("halo-")  # shown although the head was not told
    assert err.splitlines()[-1].startswith("halo: warning: key alice is stored here; ")
    assert UNREACHABLE in err and key not in err

    code, out, err = halo_here(capsys, "gateway", "key", "list", "--json", "--config", config)
    (row,) = json.loads(out)
    assert (code, row["name"], row["requests"]) == (1, "alice", None)
    assert err.count("\n") == 1 and "the keys' use is unknown" in err

    code, out, err = halo_here(capsys, "gateway", "key", "revoke", "--config", config, "alice")
    assert (code, out) == (1, "key alice revoked\n")
    assert "a running gateway accepts it until 'halo gateway start' tells it" in err
    assert read_keys(unreachable.parent / ".halo" / "s.keys.json").keys[0].revoked is not None

    code, out, err = halo_here(capsys, "gateway", "status", "--json", "--config", config)
    found = json.loads(out)
    assert (code, found["running"]) == (1, False)
    assert found["problem"] == f"a: cannot reach the head: {UNREACHABLE}"
    for command in ("start", "stop"):
        code, out, err = halo_here(capsys, "gateway", command, "--config", config)
        assert (code, out) == (1, "")
        assert err == f"halo: error: a: cannot reach the head: {UNREACHABLE}\n"


def test_bad_names_unknown_keys_and_a_garbage_key_file_are_one_line(
    unreachable: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(unreachable)
    for name in ("", "a" * 65, "../x", "héllo", "..", "-x"):
        code, out, err = halo_here(capsys, "gateway", "key", "add", "--config", config, "--", name)
        assert (code, out, err.count("\n")) == (2, "", 1) and "cannot name a key" in err
    code, _, err = halo_here(capsys, "gateway", "key", "revoke", "--config", config, "nobody")
    assert (code, err.count("\n")) == (2, 1)
    assert err.startswith("halo: error: no active key named 'nobody' in ")
    (unreachable.parent / ".halo").mkdir(exist_ok=True)
    (unreachable.parent / ".halo" / "s.keys.json").write_text("[" * 10_000)
    for command in (("list",), ("add", "bob"), ("revoke", "bob")):
        code, out, err = halo_here(capsys, "gateway", "key", *command, "--config", config)
        assert (code, out, err.count("\n")) == (2, "", 1)
        assert "not a halo.gateway_keys/1 key file" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ("port = 0", "gateway.port must be a port number (1-65535)"),
        ("port = 70000", "gateway.port must be a port number (1-65535)"),
        ("port = 8080\nrouter_port = 8080", "must differ"),
        ('host = "-x"', "gateway.host '-x'"),
        ('aliases = "fast"', "gateway.aliases is a table"),
        ('aliases = { "../x" = "small" }', "gateway.aliases is a table"),
        ("aliases = { fast = { x = 1 } }", "gateway.aliases is a table"),
    ],
)
def test_a_bad_gateway_table_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], table: str, says: str
) -> None:
    path = tmp_path / "halo.toml"
    path.write_text(f"{TOML}\n[gateway]\n{table}\n")
    for command in (("status",), ("start",), ("key", "list")):
        code, out, err = halo_here(capsys, "gateway", *command, "--config", str(path))
        assert (code, out, err.count("\n")) == (2, "", 1) and says in err, err


# -- the state file's deployments ------------------------------------------------------------
REPLICA = {"index": 0, "nodes": ["a"], "port": 8000}
DEPLOYMENT = {"name": "d", "model": "m", "engine": "llama.cpp", "layout": "llama.cpp RPC1"}
DEPLOYMENT["replicas"] = [REPLICA]  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("deployments", "says"),
    [
        ({"a": 1}, "deployments is {'a': 1}"),
        ("x" * 1_000_000, "deployments is 'xxxx"),
        ([[list(range(100_000))]], "a deployment is [[0, 1, 2, 3, ...]]"),
        ([DEPLOYMENT, DEPLOYMENT], "deployment 'd' appears twice"),
        ([{**DEPLOYMENT, "name": "a" * 100_000}], "deployment.name is 'aaa"),
        ([{**DEPLOYMENT, "engine": "bogus"}], "deployment.engine is 'bogus' (halo knows"),
        ([{**DEPLOYMENT, "model": "m\nx"}], "deployment.model is 'm\\nx'"),
        ([{**DEPLOYMENT, "layout": "-x"}], "deployment.layout is '-x'"),
        (
            [{**DEPLOYMENT, "served": ["x"] * 100_000}],
            "deployment.served is ['x', 'x', 'x', 'x', ...]",
        ),
        ([{**DEPLOYMENT, "aliases": ["", "a b"]}], "deployment.aliases is ['', 'a b']"),
        ([{**DEPLOYMENT, "replicas": [REPLICA, REPLICA]}], "two replicas have one index"),
        ([{**DEPLOYMENT, "replicas": [{**REPLICA, "nodes": ["a", "a"]}]}], "replica.nodes is"),
        ([{**DEPLOYMENT, "replicas": [{**REPLICA, "nodes": ["-oProxyCommand=x"]}]}], "nodes"),
        ([{**DEPLOYMENT, "replicas": [{**REPLICA, "memory_gib": [1] * 100_000}]}], "[1, 1, 1"),
    ],
)
def test_garbage_deployments_are_one_short_line(
    tmp_path: Path, deployments: Any, says: str
) -> None:
    with pytest.raises(ValueError) as bad:
        parse_deployments(deployments)
    assert says in str(bad.value) and len(str(bad.value)) < 200, str(bad.value)[:300]
    config = Config(tmp_path / "halo.toml", "s", "auto", (NodeConfig("a", "root@a", "10.0.0.1"),))
    state_path(config).parent.mkdir()
    document = {"schema": "halo.state/2", "cluster": "s", "head": "a", "deployments": deployments}
    state_path(config).write_text(json.dumps(document))
    with pytest.raises(StateError) as bad_file:
        read_state(config)
    assert "\n" not in str(bad_file.value) and len(str(bad_file.value)) < 400


def test_a_long_deployment_list_parses_in_linear_time() -> None:
    many = [{**DEPLOYMENT, "name": f"d{n}"} for n in range(20_000)]
    started = time.monotonic()
    assert len(parse_deployments(many)) == 20_000
    assert time.monotonic() - started < 2.5  # names.count() took seconds (minutes at 16 MiB)
