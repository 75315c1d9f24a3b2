#!/usr/bin/env python3
"""The program of the test-only "relay" engine (tests/engines/relay_engine.py), standard
library only. Not a model: a real distributed process that moves bytes over the fabric for
every token it "generates", so halo's bring-up and both witnesses can be shown on a third
engine.

    relay_server.py worker --bind ADDR --port P
        listens on ADDR:P; echoes every frame (4-byte length, payload) it receives
    relay_server.py head --host H --port P --workers A:P,B:P --model NAME [--bytes N]
        connects to every worker, then serves /health, /v1/models and /v1/completions;
        each generated token is N bytes sent to every worker and echoed back
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def say(line: str) -> None:
    print(line, flush=True)


def recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("peer closed")
        data += chunk
    return data


def worker(bind: str, port: int) -> None:
    listener = socket.create_server((bind, port))
    say(f"relay worker: listening on {bind}:{port}")

    def serve(conn: socket.socket, peer: str) -> None:
        say(f"relay worker: accepted {peer}")
        try:
            while True:
                size = struct.unpack("!I", recv_exact(conn, 4))[0]
                payload = recv_exact(conn, size)
                conn.sendall(struct.pack("!I", size) + payload)
        except (ConnectionError, OSError):
            return

    while True:
        conn, (address, _port) = listener.accept()
        threading.Thread(target=serve, args=(conn, address), daemon=True).start()


def head(args: argparse.Namespace) -> None:
    links = []
    for endpoint in args.workers.split(","):
        address, _, port = endpoint.rpartition(":")
        links.append(socket.create_connection((address, int(port)), timeout=10))
        say(f"relay head: connected to {endpoint}")
    lock = threading.Lock()
    payload = b"x" * args.bytes

    def token() -> None:
        with lock:
            for link in links:
                link.sendall(struct.pack("!I", len(payload)) + payload)
            for link in links:
                size = struct.unpack("!I", recv_exact(link, 4))[0]
                recv_exact(link, size)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, code: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, {})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": args.model}]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            tokens = int(body.get("max_tokens", 16))
            for _ in range(tokens):
                token()
            usage = {"prompt_tokens": 4, "completion_tokens": tokens}
            text = " relay" * tokens
            self._send(200, {"choices": [{"index": 0, "text": text}], "usage": usage})

        def log_message(self, format: str, *log_args: object) -> None:
            return

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    say(f"relay head: serving {args.model} on {args.host}:{args.port}")
    server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="role", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--bind", required=True)
    w.add_argument("--port", type=int, required=True)
    h = sub.add_parser("head")
    h.add_argument("--host", required=True)
    h.add_argument("--port", type=int, required=True)
    h.add_argument("--workers", required=True)
    h.add_argument("--model", required=True)
    h.add_argument("--bytes", type=int, default=4096)
    args = parser.parse_args()
    if args.role == "worker":
        worker(args.bind, args.port)
    else:
        head(args)
    sys.exit(0)


if __name__ == "__main__":
    main()
