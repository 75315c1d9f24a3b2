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
