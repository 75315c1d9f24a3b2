"""A small OpenAI-compatible server for the serve-load tests, shaped like vLLM's: streamed
completions where some tokens carry empty text, a final usage event when asked for with
``stream_options.include_usage``, ``POST /tokenize``, keep-alive connections with Nagle off
(as uvicorn has them). It records every request body it gets and every stream its client
cut (how many tokens it had been sent), and keeps its own time to first token and
inter-token latency (from a request's body read to each event written) as vLLM's
``/metrics`` histograms' ``_sum`` and ``_count``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def count_tokens(text: str) -> int:
    """This server's tokenizer: a BOS, one token per word, two for a word over 6 letters."""
    return 1 + sum(2 if len(word) > 6 else 1 for word in text.split())


class FakeOpenAI:
    def __init__(
        self,
        model: str,
        token_delay_s: float,
        usage: bool = True,
        idle_close_s: float | None = None,
        tokenize: str = "vllm",
    ) -> None:
        self.model, self.token_delay_s, self.usage = model, token_delay_s, usage
        self.tokenize = tokenize  # /tokenize as "vllm" ({prompt} -> {count}) or "llama.cpp"
        self.idle_close_s = idle_close_s  # close a keep-alive connection idle this long
        self.bodies: list[dict[str, Any]] = []
        self.connections = 0
        self.cut: list[int] = []  # per stream its client went away from: tokens it was sent
        self.own = {"ttft": [0.0, 0], "itl": [0.0, 0]}  # [sum in s, count]
        self._lock = threading.Lock()

    def observe(self, key: str, seconds: float) -> None:
        with self._lock:
            self.own[key][0] += seconds
            self.own[key][1] += 1

    def metrics(self) -> str:
        names = {"ttft": "time_to_first_token_seconds", "itl": "inter_token_latency_seconds"}
        with self._lock:
            return "".join(
                f'vllm:{names[key]}_sum{{model_name="{self.model}"}} {total!r}\n'
                f'vllm:{names[key]}_count{{model_name="{self.model}"}} {count}\n'
                for key, (total, count) in self.own.items()
            )

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True
            timeout = fake.idle_close_s

            def setup(self) -> None:
                super().setup()
                fake.connections += 1

            def _json(self, code: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": fake.model}]})
                elif self.path == "/metrics":
                    data = fake.metrics().encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    self._json(404, {"error": "not found"})

            def do_POST(self) -> None:
                self.tokens_sent: int | None = None  # a stream's, once it has begun
                try:
                    self._post()
                except (BrokenPipeError, ConnectionResetError):  # Ctrl-C in a test
                    if self.tokens_sent is not None:
                        fake.cut.append(self.tokens_sent)

            def _post(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                arrived = time.perf_counter()
                if self.path == "/tokenize" and fake.tokenize == "vllm":
                    self._json(200, {"count": count_tokens(body["prompt"]), "max_model_len": 1024})
                    return
                if self.path == "/tokenize":  # llama-server: {content, add_special} -> ids
                    if "content" not in body:
                        self._json(400, {"error": {"code": 400, "message": "no content"}})
                        return
                    count = count_tokens(body["content"]) - (0 if body.get("add_special") else 1)
                    self._json(200, {"tokens": list(range(count))})
                    return
                fake.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.tokens_sent = 0
                for index in range(body["max_tokens"]):
                    time.sleep(fake.token_delay_s)
                    text = "" if index % 3 == 1 else f" w{index}"  # a token with no text yet
                    last = index == body["max_tokens"] - 1
                    choice = {"index": 0, "text": text, "logprobs": None}
                    choice["finish_reason"] = "length" if last else None
                    self._event({"id": "cmpl-1", "object": "text_completion", "choices": [choice]})
                    self.tokens_sent = index + 1
                    sent = time.perf_counter()
                    fake.observe("itl" if index else "ttft", sent - arrived)
                    arrived = sent
                if fake.usage and (body.get("stream_options") or {}).get("include_usage"):
                    prompt = count_tokens(body["prompt"])
                    usage = {
                        "prompt_tokens": prompt,
                        "completion_tokens": body["max_tokens"],
                        "total_tokens": prompt + body["max_tokens"],
                    }
                    self._event({"id": "cmpl-1", "choices": [], "usage": usage})
                self._chunk(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")

            def _event(self, event: dict[str, Any]) -> None:
                self._chunk(f"data: {json.dumps(event)}\n\n".encode())

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

            def log_message(self, format: str, *args: object) -> None:
                return

        return Handler


@contextmanager
def serving(fake: FakeOpenAI, host: str = "127.0.0.1") -> Iterator[int]:
    """Serve ``fake`` on ``host`` (a free port, returned) for the block."""
    server = ThreadingHTTPServer((host, 0), fake.handler())
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
