"""HTTP GET behind one function: the real one against a local server, the fake, and the
exporter scrape and the node-side API through it."""

from __future__ import annotations

import http.server
import threading
import urllib.error
from collections.abc import Iterator

import pytest

from halo_cluster.bounded.httpget import FakeHttp, http_get
from halo_cluster.monitor.scrape import scrape
from halo_cluster.node import serve_api as api


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"{self.path} {self.headers.get('Authorization')}".encode()
        self.send_response(200 if self.path != "/missing" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_http_get_for_real(server: str) -> None:
    assert http_get(f"{server}/x", {"Authorization": "Bearer k"}) == b"/x Bearer k"
    assert http_get(f"{server}/x", limit_bytes=2) == b"/x"
    with pytest.raises(urllib.error.HTTPError):
        http_get(f"{server}/missing")


def test_the_fake_answers_refuses_and_records() -> None:
    fake = FakeHttp({"http://a/metrics": b"page", "http://b/metrics": TimeoutError("slow")})
    assert fake("http://a/metrics", {"X": "1"}) == b"page"
    with pytest.raises(TimeoutError):
        fake("http://b/metrics")
    with pytest.raises(urllib.error.URLError):
        fake("http://c/metrics")
    assert [url for url, _ in fake.calls] == [
        "http://a/metrics",
        "http://b/metrics",
        "http://c/metrics",
    ]
    assert fake.calls[0][1] == {"X": "1"}


def test_scrape_through_a_fake() -> None:
    page = b"# TYPE halo_scrape_errors_total counter\nhalo_scrape_errors_total 2\n"
    fake = FakeHttp({"http://node1:9877/metrics": page})
    assert scrape("node1:9877", get=fake) == {("halo_scrape_errors_total", ()): 2.0}
    refused = scrape("node2:9877", get=fake)
    assert isinstance(refused, str) and refused.startswith("node2:9877: ")


def test_node_api_through_the_real_get(server: str) -> None:
    host, port = server.removeprefix("http://").split(":")
    assert api._get(f"{server}/health", "k", 5.0) == "/health Bearer k"
    assert api._get(f"{server}/health", None, 5.0) == "/health None"
    assert host == "127.0.0.1" and int(port) > 0
