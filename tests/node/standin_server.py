"""A stand-in OpenAI-compatible server for the supervisor's local tests (never evidence of
anything an engine does): /health, /v1/models and /v1/completions answering ``max_tokens``
tokens at once. It refuses to start while the file named by its second argument exists (a
model that cannot be loaded), and hangs before it listens while that name with ``.stall``
exists (a load that never ends)."""

from __future__ import annotations

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def _answer(self, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._answer({"data": [{"id": "standin"}]})
        else:
            self._answer({})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        tokens = int(body.get("max_tokens") or 1)
        self._answer({"choices": [{"text": "x" * tokens}], "usage": {"completion_tokens": tokens}})

    def log_message(self, *args: object) -> None:
        return None


def main() -> None:
    port, broken = int(sys.argv[1]), sys.argv[2]
    if os.path.exists(broken):
        print(f"Error: cannot load the model ({broken} exists)", flush=True)
        sys.exit(1)
    if os.path.exists(broken + ".stall"):  # a load that never ends: no line, no read, no port
        while True:
            time.sleep(3600)
    print(f"stand-in serving on 127.0.0.1:{port}", flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
