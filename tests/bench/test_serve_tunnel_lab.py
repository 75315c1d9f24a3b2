"""halo bench serve --config from a controller: the head's server on its loopback is reached
through a real SSH tunnel (a real sshd on 127.0.0.1 with a generated key), which is gone
after the run, after an error and after Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.bench.fake_openai import FakeOpenAI, serving
from tests.bench.test_serve_tunnel import bench_argv, config_file, ssh_config, tunnels
from tests.conftest import free_port
from tests.test_doctor_ssh_lab import sshd  # noqa: F401 (the real sshd fixture)

pytestmark = pytest.mark.lab


def test_loopback_server_through_a_real_tunnel(sshd: tuple[Path, int]) -> None:  # noqa: F811
    tmp, sshd_port = sshd
    ssh_config(tmp, sshd_port)
    fake = FakeOpenAI("tiny", token_delay_s=0.005)
    with serving(fake) as port:
        config = config_file(tmp, f'host = "127.0.0.1"\nport = {port}')
        done = subprocess.run(
            bench_argv(config, "--output-len", "4"),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert tunnels(port) == []
    data = json.loads(done.stdout)
    assert data["endpoint"] == {
        "via": "ssh-tunnel",
        "node": "head",
        "server": f"127.0.0.1:{port}",
        "ssh": "root@head",
    }
    assert data["url"].startswith("http://127.0.0.1:") and data["url"] != f"http://127.0.0.1:{port}"
    assert [(lv["errors"], lv["output_tokens"], lv["tokens_from"]) for lv in data["levels"]] == [
        (0, 12, "usage"),
        (0, 12, "usage"),
    ]


def test_no_server_behind_the_tunnel_is_one_line(sshd: tuple[Path, int]) -> None:  # noqa: F811
    tmp, sshd_port = sshd
    ssh_config(tmp, sshd_port)
    port = free_port()
    config = config_file(tmp, f"port = {port}")
    done = subprocess.run(bench_argv(config), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("halo: error: head's server: no answer to GET /v1/models (")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert tunnels(port) == []


def test_ctrl_c_closes_the_tunnel(sshd: tuple[Path, int]) -> None:  # noqa: F811
    """Ctrl-C mid-stream: exit 130, the tunnel gone, and the stream in flight cut, not
    awaited. Shown by events, not by a time bound a loaded machine could break: the server
    sees its client go before the stream's last token (awaiting it would leave none cut)."""
    tmp, sshd_port = sshd
    ssh_config(tmp, sshd_port)
    output_len = 400  # a stream of 400 x 0.05 s = 20 s at the fake's own pace
    fake = FakeOpenAI("tiny", token_delay_s=0.05)
    with serving(fake) as port:
        config = config_file(tmp, f"port = {port}")
        proc = subprocess.Popen(
            bench_argv(config, "--output-len", str(output_len), "--warmup", "0"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # a stream in flight: its first token is out (bounds below only turn hangs into
        # failures; each wait ends at its event)
        deadline = time.monotonic() + 120
        while fake.own["ttft"][1] < 1 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.own["ttft"][1] >= 1 and tunnels(port), "no tunnel while the run streams"
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
        deadline = time.monotonic() + 60  # the server sees the cut at its next write
        while not fake.cut and time.monotonic() < deadline:
            time.sleep(0.05)
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "halo: aborted", err
    assert "Traceback" not in err and tunnels(port) == []
    assert len(fake.cut) == 1 and fake.cut[0] < output_len, fake.cut
