"""The host's view of the fabric in one call (cluster/gather.host_view): every peer pinged
at once from one ICMP socket (or, without python3 or an ICMP socket, one ``ping`` each),
and ``ethtool -i`` of the fabric interface. The script runs for real on loopback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.client.node import clients_from
from halo_cluster.cluster.gather import (
    ETHTOOL_MARK,
    PINGER,
    HostView,
    ethtool_script,
    host_view,
    parse_pings,
    ping_script,
)
from halo_cluster.config import Config, NodeConfig
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.result import Result
from tests.conftest import python39


def run_script(script: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["bash", "-s"], input=script, capture_output=True, text=True, timeout=30, env=env,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_one_process_pings_every_address() -> None:
    out = run_script(ping_script(["127.0.0.1", "127.0.0.2", "127.0.0.3"]))
    assert sorted(out.splitlines()) == ["0 0", "1 0", "2 0"]


def test_without_python_each_address_gets_its_own_ping(tmp_path: Path) -> None:
    """No python3 on the host: ``ping`` per address, in waves."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ping", "bash"):
        found = subprocess.run(["which", tool], capture_output=True, text=True, check=True)
        (bin_dir / tool).symlink_to(found.stdout.strip())
    env = {"PATH": str(bin_dir)}
    out = run_script(ping_script(["127.0.0.1", "127.0.0.2", "127.0.0.4"], wave=2), env)
    assert sorted(out.splitlines()) == ["0 0", "1 0", "2 0"]


def test_an_address_that_is_no_dotted_quad_goes_to_ping() -> None:
    """The pinger leaves what is not an IPv4 address in dotted quads to ``ping`` (exit 3)."""
    for odd in ("::1", "localhost", "127.1"):
        done = subprocess.run(["python3", "-I", "-S", "-c", PINGER, "127.0.0.1", odd],
                              capture_output=True, text=True, check=False, timeout=30)  # fmt: skip
        assert done.returncode == 3, (odd, done.stderr)


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace and a raw socket need root")
def test_a_neighbour_that_does_not_answer_and_the_interface_ethtool_reads() -> None:
    """A namespace of our own, one veth pair in it, an address on one end: that address
    answers, a neighbour that is not there does not (two seconds); ethtool reads the end
    that holds the address, and nothing for an address no interface holds."""
    ns = f"halo-ping-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for argv in (
            ["link", "set", "lo", "up"],  # one's own address answers over loopback
            ["link", "add", "hv0", "type", "veth", "peer", "name", "hv1"],
            ["addr", "add", "198.18.250.1/24", "dev", "hv0"],
            ["link", "set", "hv0", "up"],
            ["link", "set", "hv1", "up"],
        ):
            subprocess.run(["ip", "-n", ns, *argv], check=True)
        script = ping_script(["198.18.250.1", "198.18.250.2"]) + ethtool_script("198.18.250.1")
        done = subprocess.run(
            ["ip", "netns", "exec", ns, "bash", "-s"], input=script, capture_output=True,
            text=True, timeout=30, check=True,
        )  # fmt: skip
        pings, _, ethtool = done.stdout.partition(ETHTOOL_MARK)
        assert sorted(pings.splitlines()) == ["0 0", "1 1"]
        assert ethtool.startswith("hv0\ndriver: veth\n")
        none = subprocess.run(
            ["ip", "netns", "exec", ns, "bash", "-s"], input=ethtool_script("198.18.251.77"),
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        assert none.stdout == ""
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_the_host_view_of_a_node() -> None:
    node = NodeConfig("a", "a", "10.0.0.1", halo="h")
    config = Config(Path("halo.toml"), "c", "auto", (node,))
    seen: list[str] = []

    def host(argv: tuple[str, ...], stdin: str) -> Result:
        seen.append(stdin)
        text = f"1 1\n0 0\n{ETHTOOL_MARK}eth1\ndriver: ice\nversion: 1.0\n"
        return Result(argv, 0, text, "")

    client = clients_from(config, {"a": FakeRunner().on_input(["bash", "-s"], host)})["a"]
    view = host_view(client, {"b": "10.0.0.2", "c": "10.0.0.3"}, "10.0.0.1")
    assert view == HostView(
        {"b": True, "c": False}, {"eth1": "driver: ice\nversion: 1.0\n"}, None, {},
        {"b": None, "c": None},  # the host said nothing of the names: none resolved
    )  # fmt: skip
    assert "'10.0.0.2' '10.0.0.3'" in seen[0] or "10.0.0.2 10.0.0.3" in seen[0]
    assert "ip -o -4 addr show to 10.0.0.1" in seen[0]
    # a host that does not answer: no path reached, no ethtool
    down = FakeRunner().on(["bash"], Result((), 255, "", "ssh: connect to host a: timed out"))
    client = clients_from(config, {"a": down})["a"]
    assert host_view(client, {"b": "10.0.0.2"}, "10.0.0.1") == HostView({"b": False})
    # no peer and no fabric address: only the host's memory is asked (one call)
    idle = FakeRunner()
    assert host_view(clients_from(config, {"a": idle})["a"], {}, None) == HostView({})
    assert idle.calls == [("bash", "-s")]


@given(st.text(), st.integers(0, 64))
def test_any_output_gives_indexes_in_range(text: str, count: int) -> None:
    assert parse_pings(text, count) <= set(range(count))


def test_what_counts_as_answered() -> None:
    text = "0 0\n1 1\n2 0\n2 1\n7 0\nx 0\n3 0 extra\n 4 0\n"
    assert parse_pings(text, 5) == {0, 2, 4}


def test_the_pinger_runs_on_the_oldest_python_a_node_has() -> None:
    done = subprocess.run([python39(), "-I", "-S", "-c", PINGER, "127.0.0.1", "127.0.0.2"],
                          capture_output=True, text=True, check=False, timeout=30)  # fmt: skip
    assert (done.returncode, sorted(done.stdout.splitlines())) == (0, ["0 0", "1 0"]), done.stderr
