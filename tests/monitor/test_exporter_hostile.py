"""Issue 29 against real processes on 127.0.0.1: one client must not kill the exporter (N1
and its variants, with a scrape loop alongside), a 400-digit port rate (#6), an unreadable
results directory, a huge --interval, and a hostile exporter shown by ``halo top``."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from halo_cluster.monitor.exposition import parse
from tests.conftest import ROOTS
from tests.monitor.test_exporter import HALO, Scraper, get, start_exporter, stop_exporter

ROOT_PAGE = b"halo exporter: see /metrics\n"
ROOT_ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: %d\r\nConnection: keep-alive\r\n\r\n" % len(ROOT_PAGE) + ROOT_PAGE
)
PORT = (("device", "rocep194s0"), ("port", "1"))


def until(condition: object, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the state never came"
        time.sleep(0.02)


def pipelined(target: str, request: bytes, count: int) -> bytes:
    """Send ``count`` copies of ``request`` at once on one connection while reading the
    answers, until ``count`` answers to ``GET /`` have come."""
    host, port = target.split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sender = threading.Thread(target=sock.sendall, args=(request * count,))
        sender.start()
        got = bytearray()
        while len(got) < count * len(ROOT_ANSWER):
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            got += chunk
        sender.join(20)
    return bytes(got)


def never_reading(target: str, request: bytes, count: int) -> socket.socket:
    """A client that pipelines as many of ``count`` requests as the sockets take, and never
    reads an answer."""
    host, port = target.split(":")
    sock = socket.create_connection((host, int(port)), timeout=20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    with contextlib.suppress(BlockingIOError):
        sock.send(request * count)
    return sock


def test_one_client_cannot_kill_the_exporter(root_copy) -> None:
    """N1: the repro (400 pipelined ``GET /``), 5000 of them, 200 with an 8 KB header each,
    and 50 clients that pipeline /metrics requests and never read: every pipelined request
    is answered, the scrape loop alongside never fails, the process lives, its log has only
    its start-up line."""
    proc, target = start_exporter(root_copy("strix-e810"), "--interval", "200ms")
    scraper = Scraper(target)
    header_8k = b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * 8000 + b"\r\n\r\n"
    try:
        assert pipelined(target, b"GET / HTTP/1.1\r\n\r\n", 400) == ROOT_ANSWER * 400
        assert pipelined(target, b"GET / HTTP/1.1\r\n\r\n", 5000) == ROOT_ANSWER * 5000
        assert pipelined(target, header_8k, 200) == ROOT_ANSWER * 200
        held = [never_reading(target, b"GET /metrics HTTP/1.1\r\n\r\n", 3000) for _ in range(50)]
        scrapes = len(scraper.latencies_s)
        until(lambda: len(scraper.latencies_s) >= scrapes + 10)  # scraped while they hang
        for sock in held:
            sock.close()
        assert proc.poll() is None
    finally:
        failures, _slowest, count = scraper.end()
        log = stop_exporter(proc)
    assert failures == [] and count > 10
    assert log.count("\n") == 1 and log.startswith("halo exporter on http://"), log


def test_the_node_side_exporter_under_python_3_9_too(root_copy) -> None:
    """The unit form (``halo monitoring exporter-unit``) runs the node side's exporter on
    the node's Python: it died the same way."""
    import halo_cluster
    from tests.conftest import free_port, python39

    port = free_port()
    argv = ["exporter", "--root", str(root_copy("strix-e810")), "--listen", f"127.0.0.1:{port}"]
    src = str(Path(halo_cluster.__file__).parents[1])
    proc = subprocess.Popen(
        [python39(), "-c", f"import sys; from halo_cluster.node.main import main; main({argv!r})"],
        env={**os.environ, "PYTHONPATH": src},
        stderr=subprocess.PIPE,
        text=True,
    )
    target = f"127.0.0.1:{port}"
    try:
        until(lambda: _answers(target) or proc.poll() is not None)
        assert pipelined(target, b"GET / HTTP/1.1\r\n\r\n", 400) == ROOT_ANSWER * 400
        assert "halo_rdma_port_state" in get(f"http://{target}/metrics")
    finally:
        log = stop_exporter(proc)
    assert log.count("\n") == 1 and log.startswith("halo exporter on http://"), log


def _answers(target: str) -> bool:
    try:
        return "halo_rdma_port_state" in get(f"http://{target}/metrics")
    except OSError:
        return False


def test_a_400_digit_port_rate_is_no_series_never_a_500(root_copy) -> None:
    """#6: every scrape was an HTTP 500 (OverflowError) while the file was there. Then it
    was +Inf while the inventory said null (Hardening 4): no rate, as the inventory says."""
    root = root_copy("strix-e810")
    rate = next(root.glob("sys/devices/**/infiniband/rocep194s0/ports/1/rate"))
    rate.write_text("1" * 400 + " Gb/sec (4X EDR)\n")
    proc, target = start_exporter(root, "--interval", "200ms")
    try:
        samples = parse(get(f"http://{target}/metrics"))
    finally:
        log = stop_exporter(proc)
    assert ("halo_rdma_port_rate_bytes_per_second", PORT) not in samples
    assert samples[("halo_rdma_port_state", PORT)] == 4
    assert "Traceback" not in log and log.count("\n") == 1, log


def test_a_counter_file_replaced_by_rename_shows_its_new_value(root_copy) -> None:
    root = root_copy("strix-e810")
    proc, target = start_exporter(root, "--interval", "100ms")
    key = ("halo_rdma_hw_counter_total", (*PORT, ("counter", "CRC errors")))
    counter = next(root.glob("sys/devices/**/rocep194s0/ports/1/hw_counters/CRC errors"))
    try:
        before = parse(get(f"http://{target}/metrics"))[key]
        fresh = counter.with_name("new")
        fresh.write_text(f"{int(before) + 12345}\n")
        fresh.rename(counter)
        until(lambda: parse(get(f"http://{target}/metrics"))[key] == before + 12345)
    finally:
        stop_exporter(proc)


# -- the results directory, --baseline ------------------------------------------------------
def exporter_once(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HALO, "exporter", "--root", str(ROOTS / "strix-e810"), "--once", *extra],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        check=False,
    )


def test_an_unreadable_results_directory_is_a_warning(tmp_path: Path) -> None:
    long_name = tmp_path / ("a" * 300)  # ENAMETOOLONG: unreadable even for root
    done = exporter_once({"XDG_DATA_HOME": str(long_name)})
    assert done.returncode == 0 and "halo_rdma_port_state" in done.stdout
    assert done.stderr == (
        f"halo: warning: cannot read the results directory {long_name}/halo/results: "
        "File name too long; latency alerts use the first steady p50\n"
    )
    results = tmp_path / "data" / "halo" / "results"
    results.mkdir(parents=True)
    os.mkfifo(results / "fifo.json")  # never waited on
    (results / "zero.json").symlink_to("/dev/zero")  # never read without end
    (results / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    done = exporter_once({"XDG_DATA_HOME": str(tmp_path / "data")})
    assert (done.returncode, done.stderr) == (0, "")


def test_a_results_directory_without_permission(tmp_path: Path) -> None:
    """The directory exists but this user may not list it: the exporter's baseline lookup
    (in a forked child that drops to nobody when the tests run as root) warns in one line."""
    from halo_cluster.cli.monitor import _baseline

    results = tmp_path / "data" / "halo" / "results"
    results.mkdir(parents=True)
    results.chmod(0o000)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: what _baseline says on stderr, and what it returns
        try:
            os.environ["XDG_DATA_HOME"] = str(tmp_path / "data")
            if os.getuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            with os.fdopen(write, "w") as err:
                sys.stderr = err
                print(_baseline(None), file=err)
        except BaseException as err:
            os.write(write, f"raised {type(err).__name__}".encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        assert pipe.read() == (
            f"halo: warning: cannot read the results directory {results}: Permission denied; "
            "latency alerts use the first steady p50\n{}\n"
        )


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "a FIFO, not a regular file"),
        (
            '{"schema": "halo.bench.net/1", "paths": [{"peer": "n2", "path": "fabric", '
            '"latency_us": {"p50": 1e400}}]}',
            "not JSON (number 1e400 is out of range)",
        ),
        (
            '{"schema": "halo.bench.net/1", "paths": [{"peer": "n2", "path": "fabric", '
            '"latency_us": {"p50": 1' + "0" * 400 + "}}]}",
            "not JSON (number 100000000000000000000000... (401 digits) is out of range)",
        ),
        ("[" * 100_000 + "]" * 100_000, "not JSON (nested deeper than 100 levels)"),
    ],
    ids=["fifo", "1e400", "10**400", "deep"],
)
def test_a_bad_baseline_file_is_one_line(tmp_path: Path, content: str | None, reason: str) -> None:
    path = tmp_path / "base.json"
    if content is None:
        os.mkfifo(path)
    else:
        path.write_text(content)
    done = exporter_once({}, "--baseline", str(path))
    assert (done.returncode, done.stderr) == (
        2,
        f"halo: error: {path}: not a bench net result usable as a baseline ({reason})\n",
    )


# -- durations ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (
            ["exporter", "--interval", "99999999999999999999s"],
            "--interval '99999999999999999999s': must be at most 24h",
        ),
        (["exporter", "--rescan", "25h"], "--rescan '25h': must be at most 24h"),
        (["exporter", "--rdma-probe-every", "9" * 400], "--rdma-probe-every '"),
        (
            ["top", "--targets", "x:1", "--once", "--interval", "999999999h"],
            "--interval '999999999h': must be at most 24h",
        ),
    ],
    ids=["interval", "rescan", "rdma-probe-every", "top"],
)
def test_a_huge_duration_is_a_one_line_usage_error(argv: list[str], error: str) -> None:
    done = subprocess.run(
        [HALO, *argv, "--root", str(ROOTS / "strix-e810")]
        if argv[0] == "exporter"
        else [HALO, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"halo: error: {error}"), done.stderr


def test_the_exporters_threads_survive_any_interval() -> None:
    """Built with a huge interval anyway (not from the command line): its waits are bounded,
    no thread dies of OverflowError."""
    from halo_cluster.monitor.exporter import Exporter
    from halo_cluster.monitor.probes import Target
    from halo_cluster.monitor.sampler import Sampler

    died: list[BaseException | None] = []
    hook = threading.excepthook
    threading.excepthook = lambda args: died.append(args.exc_value)
    try:
        for interval in (1e300, float("inf"), float("nan")):
            exporter = Exporter(
                Sampler(str(ROOTS / "strix-e810")), [Target("p", "extra", "127.0.0.1", 1)], interval
            )
            exporter.start()
            exporter.stop()  # the threads wait on their stop event: it ends them at once
            assert not exporter._thread.is_alive() and not exporter.prober._thread.is_alive()
    finally:
        threading.excepthook = hook
    assert died == []


# -- halo top and a hostile exporter --------------------------------------------------------
HOSTILE = (
    'halo_net_up{interface="eth\x1b[2J\x1b[H0"} 1\n'
    'halo_net_receive_bytes_total{interface="eth\x1b[2J\x1b[H0"} +Inf\n'
    'halo_rdma_port_state{device="mlx\u009b2J",port="1"} NaN\n'
    "halo_rdma_port_state 3\n"
    'halo_probe_rtt_seconds{peer="p\u202eq\\nr",path="fabric",quantile="abc"} 0.001\n'
    'halo_probe_rtt_seconds{peer="p\u202eq\\nr",path="fabric",quantile="0.5"} 0.001\n'
    'halo_probe_rtt_seconds{peer="p\u202eq\\nr",path="fabric",quantile="0.99"} +Inf\n'
    'halo_alert{alert="link_down\x07",subject="interface=eth\x1b]0;pwned\x07"} 1\n'
).encode()


@pytest.fixture
def hostile_exporter() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(HOSTILE)))
            self.end_headers()
            self.wfile.write(HOSTILE)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_top_shows_a_hostile_exporter_as_text(hostile_exporter: str) -> None:
    """Escape codes in labels (one clears the screen), a C1 CSI, a bidi override, a newline,
    NaN and +Inf values, a series without labels and a quantile that is no number: shown
    escaped, never obeyed, never a traceback."""
    target = hostile_exporter
    argv = [HALO, "top", "--targets", target, "--once", "--interval", "100ms"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        f"== {target}",
        "   rdma /                state 3  tx    0.000 Gb/s  rx    0.000 Gb/s",
        "   rdma mlx\\x9b2J/1      state nan tx    0.000 Gb/s  rx    0.000 Gb/s",
        "   net  eth\\x1b[2J\\x1b[H0 up       tx    0.000 Gb/s  rx      nan Gb/s"
        "          0/        0 pkt/s  errors 0.0/s",
        "   probe p\\u202eq\\nr fabric  p50   1000.0 µs  p99      inf µs",
        "   ALERT link_down\\x07: interface=eth\\x1b]0;pwned\\x07",
    ]
    as_json = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=60)
    assert as_json.returncode == 0 and as_json.stdout.isascii()
    node = json.loads(as_json.stdout)["nodes"][0]
    assert node["ports"][1]["device"] == "mlx\x9b2J" and node["probes"][0]["p99_us"] is None
