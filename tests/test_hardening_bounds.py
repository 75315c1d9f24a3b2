"""Hardening 4, section 5 ("Bounded, and no hangs"): each defect as it was reproduced on
main, now bounded. A transfer hop's listener that one silent or slow peer held; an exporter
that refused scrapes to clients that pipeline and never read; ``halo top`` reading a page
without a limit; ``halo run`` reading tune results unchecked; a ring config that exhausted
memory computing paths; numbers that overflow ``halo plan``; an MoE asking for more experts
than it has; a rate served as +Inf; a token witness printing invalid JSON."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from halo_cluster.modelstore import pipe
from halo_cluster.modelstore.manifest import HashCache, make_manifest, source_files
from halo_cluster.modelstore.transfer import PipeEvent, parse_pipe_spec
from tests.conftest import free_port


def until(condition: Callable[[], object], timeout_s: float = 30.0) -> None:
    """Wait for an observable state (never a guessed duration); generous for a loaded
    machine, and only ever reached when the state never comes."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the state never came"
        time.sleep(0.01)


# -- a transfer hop's listener ----------------------------------------------------------------
class Hop:
    """One listening hop of a transfer on 127.0.0.1, its events as they come."""

    def __init__(self, tmp: Path, wait_s: float) -> None:
        top = tmp / "src"
        top.mkdir()
        (top / "a").write_bytes(b"x" * 100)
        files, entry = source_files(str(top))
        self.manifest = make_manifest("tiny", files, entry, str(top), HashCache(None))
        self.files = dict(files)
        self.secret = pipe.new_secret()
        self.events: list[dict[str, Any]] = []
        spec = self._spec(str(tmp / "n1"), {"listen": "127.0.0.1", "secret": self.secret})
        spec["wait_s"] = wait_s
        self.thread = threading.Thread(
            target=pipe.relay, args=(parse_pipe_spec(json.dumps(spec)), self._emit), daemon=True
        )
        self.thread.start()
        until(lambda: self.kinds()[:1] == ["listening"])
        self.port = int(self.events[0]["port"])

    def _spec(self, store: str | None, source: dict[str, Any]) -> dict[str, Any]:
        return {
            "store": store,
            "target": store is not None,
            "manifest": self.manifest.to_dict(),
            "stream": [{**f.to_dict(), "offset": 0} for f in self.manifest.files],
            "want": {"a": 0},
            "input": source,
            "route": [],
            "wait_s": 10,
            "idle_s": 10,
        }

    def _emit(self, event: PipeEvent) -> None:
        self.events.append(event.to_dict())

    def kinds(self) -> list[str]:
        return [str(e["event"]) for e in list(self.events)]

    def send(self) -> None:
        """The hop before: the source, with its secret and the stream."""
        spec = self._spec(None, {"files": self.files})
        spec["route"] = [{"address": "127.0.0.1", "port": self.port, "secret": self.secret}]
        pipe.relay(parse_pipe_spec(json.dumps(spec)), lambda _e: None)

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=30)


def test_a_silent_and_a_slow_peer_do_not_hold_a_hops_listener(tmp_path: Path) -> None:
    """Held 43 s past an 8 s wait: the listener heard one peer at a time, each for up to
    10 s per read. Now the real upstream is admitted while both are still connected."""
    hop = Hop(tmp_path, wait_s=60)
    with hop.connect() as silent, hop.connect() as slow:
        slow.sendall(b"0")  # the start of a secret, and then nothing more for now
        hop.send()
        hop.thread.join(30)
        assert not hop.thread.is_alive()
        kinds = hop.kinds()
        assert kinds[:2] == ["listening", "admitted"], kinds
        assert kinds.count("refused") == 2 and hop.events[-1]["complete"] is True
        for peer in (silent, slow):  # let go once the upstream came
            with contextlib.suppress(ConnectionResetError):
                assert peer.recv(1) == b""


def test_a_silent_peer_is_let_go_after_its_own_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One peer's time is its own (``AUTH_S``), not the whole wait: the hop is still
    listening after it, and admits the real upstream."""
    monkeypatch.setattr(pipe, "AUTH_S", 0.2)
    hop = Hop(tmp_path, wait_s=8)  # the wait: the silent peer held all of it
    with hop.connect() as silent:
        until(lambda: "refused" in hop.kinds())
        with contextlib.suppress(ConnectionResetError):
            assert silent.recv(1) == b""
    hop.send()
    hop.thread.join(30)
    assert hop.kinds()[:3] == ["listening", "refused", "admitted"]
    assert hop.events[-1]["complete"] is True


def test_many_silent_peers_make_the_oldest_give_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipe, "MAX_PENDING", 4)
    hop = Hop(tmp_path, wait_s=60)
    held = [hop.connect() for _ in range(6)]
    try:
        until(lambda: hop.kinds().count("refused") == 2)
        hop.send()
        hop.thread.join(30)
        assert "admitted" in hop.kinds() and hop.events[-1]["complete"] is True
    finally:
        for sock in held:
            sock.close()


# -- a ring config's paths ------------------------------------------------------------------
def ring(count: int) -> str:
    """A halo.toml of ``count`` nodes cabled in a ring (1000 of them: 90 KB)."""
    nodes = "".join(
        f'[[node]]\nname = "n{i}"\nfabric_address = "10.1.{i // 250}.{i % 250 + 1}"\n'
        f'links = {{ tb0 = "n{(i + 1) % count}", tb1 = "n{(i - 1) % count}" }}\n'
        for i in range(count)
    )
    return f'[cluster]\nname = "ring"\n[fabric]\nlink_network = "10.254.0.0/16"\n{nodes}'


def test_a_ring_of_1000_nodes_is_one_line_not_gigabytes(tmp_path: Path) -> None:
    """It took 4 GB computing paths. Loaded in a child held to 1 GiB of address space, so
    that the old code fails the test instead of the machine."""
    path = tmp_path / "halo.toml"
    path.write_text(ring(1000))
    assert path.stat().st_size < 100_000  # far within the 1 MiB a halo.toml may be
    child = (
        "import resource, sys\nfrom pathlib import Path\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from halo_cluster.config import ConfigError, load_config\n"
        "try:\n"
        "    load_config(Path(sys.argv[1]))\n"
        "except ConfigError as err:\n"
        "    print(err)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, str(path)], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        f"{path}: 1000 [[node]] entries: a cluster has at most 256; split it into several "
        "halo.toml\n"
    )


def test_a_fabric_bounds_its_nodes_and_cables() -> None:
    from halo_cluster.errors import FabricError
    from halo_cluster.mesh import build_fabric

    ids = {f"n{i}": f"10.1.{i // 250}.{i % 250 + 1}" for i in range(257)}
    with pytest.raises(FabricError, match=r"^257 nodes: a routed fabric has at most 256; "):
        build_fabric(ids, {}, "10.254.0.0/16")
    ids = {"a": "10.1.0.1", "b": "10.1.0.2"}
    many = {"a": [(f"x{i}", "b") for i in range(1025)], "b": [(f"y{i}", "a") for i in range(1025)]}
    with pytest.raises(FabricError, match=r"^1025 cables: a routed fabric has at most 1024; "):
        build_fabric(ids, many, "10.254.0.0/16")


def test_paths_are_kept_in_n_squared() -> None:
    """Each path was kept with every node on it: n² paths of up to n nodes. A ring of 200
    (the bound is 256) now keeps a few MB while the paths are computed."""
    from halo_cluster.mesh import _cables, _paths

    count = 200
    order = [f"n{i}" for i in range(count)]
    cabling = {
        n: [("tb0", order[(i + 1) % count]), ("tb1", order[i - 1])] for i, n in enumerate(order)
    }
    cables = _cables(order, cabling, "10.254.0.0/16")
    tracemalloc.start()
    try:
        _paths(order, cables)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak >> 20} MiB"


# -- the exporter's server and clients that never read --------------------------------------
PAGE = b"halo_up 1\n" * (400 << 10)  # 4 MiB: far more than the kernel buffers for a socket


def scrape_once(address: tuple[str, int]) -> bytes:
    """One scrape as Prometheus makes it: the whole answer, or what came before a reset."""
    got = bytearray()
    with (
        contextlib.suppress(ConnectionResetError, BrokenPipeError),
        socket.create_connection(address, timeout=30) as sock,
    ):
        sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        while chunk := sock.recv(1 << 20):
            got += chunk
    return bytes(got)


def test_clients_that_pipeline_and_never_read_do_not_cost_scrapes() -> None:
    """2000 such clients made the exporter refuse 66 of 158 scrapes: every slot held an
    answer nobody took, and a new connection was refused rather than one of those closed.
    Here 24 of them against 8 slots (the held answers never time out: no race)."""
    from halo_cluster.monitor.httpd import MetricsServer

    srv = MetricsServer(
        "127.0.0.1",
        free_port(),
        lambda _target: (200, "text/plain", PAGE),
        max_connections=8,
        send_timeout_s=3600,
    )
    thread = srv.start()
    clients = []
    try:
        for _ in range(24):
            sock = socket.create_connection(srv.server_address, timeout=30)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                sock.send(b"GET /metrics HTTP/1.1\r\n\r\n" * 3000)
            clients.append(sock)
        until(lambda: len(srv.conns) == 8 and all(c.out for c in list(srv.conns.values())))
        for _ in range(5):
            answer = scrape_once(srv.server_address)
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(PAGE)
        assert len(srv.conns) <= 8 and srv.failed == 0
    finally:
        srv.shutdown()
        thread.join(30)
        srv.server_close()
        for sock in clients:
            sock.close()


# -- halo top reading a page ----------------------------------------------------------------
def test_top_reads_an_exporters_page_with_a_limit() -> None:
    """A 5 MB page took 850 MB: read whole, then parsed. A page over 1 MiB is now one line,
    and what reading it costs stays near the limit."""
    import http.server

    from halo_cluster.monitor.scrape import scrape

    line = b'halo_rdma_hw_counter_total{device="d",port="1",counter="c%d"} 1\n'
    page = b"".join(line % i for i in range(40_000))  # 2.6 MB, every line a sample

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the reader stops at its limit
                self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{server.server_address[1]}"
    tracemalloc.start()
    try:
        found = scrape(target, timeout_s=30)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        server.shutdown()
        server.server_close()
    assert found == (
        f"{target}: a page larger than 1 MiB: not a halo exporter's (check the target)"
    )
    assert peak < 8 << 20, f"{peak >> 20} MiB"


# -- halo run reading tune results ----------------------------------------------------------
TUNED = {"cluster": "lab", "model": "tiny", "winner": {"layout": "vllm TP2"}}


@pytest.mark.parametrize(
    "newest",
    [
        json.dumps({**TUNED, "winner": ["vllm TP1"]}),  # AttributeError: a list's .get
        json.dumps({**TUNED, "winner": "vllm TP1"}),
        json.dumps({**TUNED, "winner": {"layout": {"a": 1}}}),
        json.dumps([TUNED]),
        "[" * 100_000 + "]" * 100_000,  # RecursionError
        '{"cluster": "lab", "model": "tiny", "winner": {"layout": "vllm TP1"}, "x": 1e999}',
        None,  # a FIFO: read_text() waited for a writer forever
    ],
    ids=["winner-list", "winner-str", "layout-dict", "list", "deep", "1e999", "fifo"],
)
def test_run_passes_over_a_tune_result_it_cannot_read(tmp_path: Path, newest: str | None) -> None:
    import os

    from halo_cluster.recipes.run import latest_tune

    results = tmp_path / "results"
    results.mkdir()
    (results / "tune-20261202T000000.json").write_text(json.dumps(TUNED))
    bad = results / "tune-20261202T000001.json"
    if newest is None:
        os.mkfifo(bad)
    else:
        bad.write_text(newest)
    found: list[object] = []
    reader = threading.Thread(
        target=lambda: found.append(latest_tune(results, "tiny", "lab")), daemon=True
    )
    reader.start()
    reader.join(30)
    if reader.is_alive():  # waiting on the FIFO: give it a writer so the thread ends
        os.close(os.open(bad, os.O_WRONLY | os.O_NONBLOCK))
    assert found == [("vllm TP2", "tune-20261202T000000.json")]


# -- the token witness on the node ----------------------------------------------------------
def _content(logprob: str, top: str) -> bytes:
    """A llama-server answer of one step, its numbers as the engine wrote them."""
    return (
        '{"choices": [{"text": "x", "logprobs": {"content": [{"id": 7, "token": "x", '
        f'"logprob": {logprob}, "top_logprobs": {top}}}]}}}}]}}'
    ).encode()


def _columns(logprobs: str, tops: str) -> bytes:
    """A vLLM answer of two steps (its columns)."""
    return (
        '{"choices": [{"text": "xy", "logprobs": {"tokens": ["x", "y"], '
        f'"token_logprobs": {logprobs}, "top_logprobs": {tops}}}}}]}}'
    ).encode()


TOP = '[{"id": 7, "token": "x", "logprob": -0.5}, {"id": 8, "token": "z", "logprob": -Infinity}]'


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (_content("NaN", TOP), {"token": "x", "id": 7, "logprob": None, "top": [["#7", -0.5]]}),
        (_content("Infinity", "[]"), {"token": "x", "id": 7, "logprob": None, "top": []}),
        (_content("-1e999", "null"), {"token": "x", "id": 7, "logprob": None, "top": []}),
        (
            _columns("[-0.25, NaN]", '[{"x": -0.25, "q": NaN}, {"y": -Infinity}]'),
            [
                {"token": "x", "id": None, "logprob": -0.25, "top": [["x", -0.25]]},
                {"token": "y", "id": None, "logprob": None, "top": []},
            ],
        ),
    ],
    ids=["nan", "inf", "1e999", "columns"],
)
def test_serve_tokens_prints_strict_json_whatever_numbers_the_engine_gives(
    raw: bytes, expected: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """NaN and ±Infinity were printed as they came: not JSON, and the controller refused
    the whole answer. A number that is not finite is now an unknown log-probability."""
    from halo_cluster.bounded.jsonin import loads

    code, out, err = _serve_tokens(raw, capsys)
    assert (code, err) == (0, "")
    steps = loads(out)["answers"][0]["steps"]  # strict: NaN or Infinity would be an error
    assert steps == (expected if isinstance(expected, list) else [expected])


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 100 levels"),
        (
            _content("-1", "7"),
            "the server's logprobs have a step's top_logprobs that is not a list",
        ),
        (_columns("5", "null"), "the server's logprobs have token_logprobs that is not a list"),
        (_columns("[-1]", "null"), "the server's logprobs have columns of different lengths"),
        (
            _content("1" * 400, "[]"),
            "number 111111111111111111111111... (400 digits) is out of range",
        ),
    ],
    ids=["deep", "top-int", "column-int", "short-column", "400-digits"],
)
def test_serve_tokens_says_in_one_line_what_it_cannot_read(
    raw: bytes, error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each was a traceback on the node (RecursionError, TypeError, OverflowError)."""
    code, out, err = _serve_tokens(raw, capsys)
    assert (code, out, err) == (1, "", f"request failed: {error}\n")


def _serve_tokens(raw: bytes, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``serve-tokens`` on the node against a server whose completion is ``raw``."""
    import http.server

    from halo_cluster.node.main import main

    class Engine(http.server.BaseHTTPRequestHandler):
        def _send(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(b'{"data": [{"id": "tiny"}]}')

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self._send(raw)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = str(server.server_address[1])
        code = main(["serve-tokens", "--port", port, "--tokens", "1", "--top", "2", "--prompt=a"])
    finally:
        server.shutdown()
        server.server_close()
    out, err = capsys.readouterr()
    return code, out, err


# -- halo plan's numbers and an MoE's experts -----------------------------------------------
@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        (
            "--memory-bw-gbs",
            "1e-310",  # ZeroDivisionError
            "--memory-bw-gbs 1e-310 is not a plausible memory bandwidth: give one from 0.001 "
            "to 1e+06",
        ),
        (
            "--memory-gib",
            "1e308",  # OverflowError
            "--memory-gib 1e+308 is not a plausible memory size: give one from 0.001 to 1e+06",
        ),
        (
            "--weights-gib",
            "1e-300",
            "--weights-gib 1e-300 is not a plausible model size: give one from 1e-06 to 100000",
        ),
    ],
    ids=["bandwidth", "memory", "weights"],
)
def test_plan_refuses_numbers_no_node_has_in_one_line(
    capsys: pytest.CaptureFixture[str], option: str, value: str, error: str
) -> None:
    from tests.conftest import halo_here

    assert halo_here(capsys, "plan", "llama-3.1-8b", option, value) == (
        2,
        "",
        f"halo: error: {error}\n",
    )


def test_an_moe_asking_more_experts_per_token_than_it_has_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was planned without complaint (each token read 9 of 8 experts)."""
    from halo_cluster.capacity.spec import ModelSpec
    from halo_cluster.errors import UsageError
    from tests.conftest import halo_here

    config = {
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 32000,
        "num_local_experts": 8,
        "num_experts_per_tok": 9,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert halo_here(capsys, "plan", "--hf-config", str(path)) == (
        2,
        "",
        f"halo: error: {path}: num_experts_per_tok = 9 is more than the model's 8 experts "
        "(num_local_experts): check the config.json\n",
    )
    with pytest.raises(UsageError, match=r"^model m: 3 experts per token but 2 experts: "):
        ModelSpec("m", "m", 1, 8, 1, 1, 8, 8, 8, experts=2, active_experts=3)  # a GGUF's, say
    path.write_text(json.dumps({**config, "num_experts_per_tok": 8}))
    code, _out, err = halo_here(capsys, "plan", "--hf-config", str(path))
    assert (code, err) == (0, "")


# -- a 400-digit port rate ------------------------------------------------------------------
def test_a_rate_no_number_holds_is_absent_from_exporter_and_inventory_alike(
    root_copy: Callable[[str], Path],
) -> None:
    """The exporter served +Inf where the inventory showed null: both now say there is no
    rate (the port's other series stay)."""
    from halo_cluster.facts.inventory import collect_inventory
    from halo_cluster.jsonout import finite
    from halo_cluster.monitor.sampler import Sampler

    root = root_copy("strix-e810")
    rate = next(root.glob("sys/devices/**/infiniband/rocep194s0/ports/1/rate"))
    rate.write_text("1" * 400 + " Gb/sec (4X EDR)\n")
    ports = finite(collect_inventory(str(root)).to_dict())["rdma"][0]["ports"]
    assert [p["rate_gbps"] for p in ports] == [None]
    sampler = Sampler(str(root))
    try:
        values = sampler.sample().values
    finally:
        sampler.close()
    port = (("device", "rocep194s0"), ("port", "1"))
    assert ("halo_rdma_port_rate_bytes_per_second", port) not in values
    assert values[("halo_rdma_port_state", port)] == 4
