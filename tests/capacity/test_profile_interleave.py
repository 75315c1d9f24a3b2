"""The profile's vLLM requests take turns between layouts: measured against real HTTP
servers on loopback that stream completions as vLLM's OpenAI server does, one at once and
one a token every 0.1 s."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from halo_cluster.errors import HaloError
from halo_cluster.lab import served

arrivals: list[int] = []  # the ports completions reached, in order


def _server(gap_s: float, tokens: int | None = None) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = json.dumps({"data": [{"id": "tiny"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            asked = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            assert asked["model"] == "tiny" and asked["stream"] is True
            arrivals.append(self.server.server_address[1])
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for index in range(asked["max_tokens"] if tokens is None else tokens):
                time.sleep(gap_s if index else 0.0)
                self.wfile.write(b'data: {"choices": [{"text": "x"}]}\n\n')
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture
def servers() -> Iterator[dict[int, ThreadingHTTPServer]]:
    arrivals.clear()
    found = {1: _server(0.0), 2: _server(0.1)}
    for server in found.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield found
    for server in found.values():
        server.shutdown()
        server.server_close()


def test_layouts_take_turns_and_the_warm_up_is_dropped(
    servers: dict[int, ThreadingHTTPServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(served, "SETTLE_S", 0.0)
    ports = {tp: server.server_address[1] for tp, server in servers.items()}
    said: list[str] = []
    found = served.interleaved_decode(ports, 3, said.append, tokens=6)
    one, two = ports[1], ports[2]
    # a warm-up round, then three measured rounds, the order reversed every round
    assert arrivals == [one, two, two, one, one, two, two, one]
    assert said == [f"vLLM: {n} of 3 rounds of requests" for n in (1, 2, 3)]
    assert set(found) == {1, 2} and all(len(v) == 3 for v in found.values())
    # each figure is its own server's pace: one sleeps 0.1 s between tokens (less a little
    # when the client reads the first token late), the other streams them at once
    assert min(found[2]) > 0.08 and min(found[2]) > 2 * max(found[1])


def test_a_server_that_streams_too_few_tokens_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(served, "SETTLE_S", 0.0)
    short = _server(0.001, tokens=3)
    threading.Thread(target=short.serve_forever, daemon=True).start()
    try:
        with pytest.raises(HaloError, match=r"vllm serve \(TP=1\): only 3 of 12 tokens streamed"):
            served.interleaved_decode({1: short.server_address[1]}, 2, tokens=12)
    finally:
        short.shutdown()
        short.server_close()


def test_a_server_behind_its_client_sends_tokens_in_chunks_and_its_own_count_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM under load merges tokens into one chunk; with continuous usage asked, every
    chunk says the tokens so far, and the pace is time over tokens, not over chunks."""
    monkeypatch.setattr(served, "SETTLE_S", 0.0)
    asked_options: list[object] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: object) -> None:
            pass

        def do_POST(self) -> None:
            asked = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            asked_options.append(asked.get("stream_options"))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for so_far in range(4, 65, 4):  # 16 chunks of 4 tokens, 0.02 s apart
                time.sleep(0.02)
                chunk = {"choices": [{"text": "xxxx"}], "usage": {"completion_tokens": so_far}}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
            closing = {"choices": [], "usage": {"completion_tokens": 64}}
            self.wfile.write(b"data: " + json.dumps(closing).encode() + b"\n\ndata: [DONE]\n\n")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        seconds = served._token_seconds(server.server_address[1], "tiny", "vllm serve (TP=1)", 64)
    finally:
        server.shutdown()
        server.server_close()
    assert asked_options == [{"include_usage": True, "continuous_usage_stats": True}]
    # 15 gaps of at least 0.02 s over 60 tokens: ~0.005 s a token; counted a token a
    # chunk it would be at least the 0.02 s of a gap
    assert 0.02 / 4 * 0.99 < seconds < 0.02


def test_a_vllm_start_lost_to_a_port_in_use_is_made_again_once_and_other_causes_are_named(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ranks' stderr is kept: a layout whose rank died on a port taken meanwhile starts
    again on other ports (once); any other death is one line with what the rank raised."""
    import subprocess
    import sys
    from pathlib import Path

    from halo_cluster.lab import profile

    def dies(said: str) -> str:
        return f"import sys; sys.stderr.write('Traceback (most recent call last):\\n{said}\\n'); sys.exit(1)"

    scripts = [dies("OSError: [Errno 98] Address already in use"), "import time; time.sleep(30)"]
    started: list[str] = []

    def start(
        self: object, vllm: str, checkpoint: str, tp: int, processes: list, logs: Path
    ) -> int:
        logs.mkdir(parents=True, exist_ok=True)
        code = scripts[len(started)]
        started.append(code)
        with open(logs / "rank0.log", "wb") as log:
            processes.append(
                subprocess.Popen([sys.executable, "-c", code], stderr=log, start_new_session=True)
            )
        return 8000 + len(started)

    monkeypatch.setattr(profile.Profiler, "_vllm_start", start)
    monkeypatch.setattr(profile, "healthy", lambda port: port == 8002)
    told: list[str] = []
    lab = profile.Profiler.__new__(profile.Profiler)
    lab.progress = told.append
    processes: list = []
    try:
        assert lab._vllm_ready("vllm", "ckpt", 2, processes, Path(str(tmp_path))) == 8002
        assert len(processes) == 1 and processes[0].poll() is None  # the first attempt's gone
        assert told == [
            "vllm serve (TP=2): rank0: OSError: [Errno 98] Address already in use; "
            "starting it again on other ports"
        ]
        scripts.append(dies("RuntimeError: Gloo connectFullMesh failed"))
        with pytest.raises(HaloError, match=r"TP=1\) exited \(1\) before it was ready: rank0: "
                           r"RuntimeError: Gloo connectFullMesh failed"):  # fmt: skip
            lab._vllm_ready("vllm", "ckpt", 1, [], Path(str(tmp_path)) / "again")
    finally:
        served.stop_all(processes)
