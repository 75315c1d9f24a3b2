"""halo bench net through scripted nodes: which tools run where with which arguments (each
node's own RDMA device and GID), the built-in probe where tools are missing, ports already
in use, a node lost mid-run, and that every run ends with the cleanup of its remote jobs."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from halo_cluster.bench.net import NetBench
from halo_cluster.bench.net_legs import legs, pairs_of
from halo_cluster.client.node import clients_from
from halo_cluster.config import Config, NodeConfig
from halo_cluster.errors import BenchError, ParseError, UsageError
from halo_cluster.runner.result import TIMED_OUT, LineSink, Result
from halo_cluster.transport import plan_transport
from tests.cluster.test_lifecycle import strix_pair
from tests.conftest import OUTPUTS

TOOLS = OUTPUTS / "tools"
ALL_TOOLS = ("sockperf", "qperf", "iperf3", "ib_write_lat", "ib_write_bw")


class ScriptedNode:
    """A node answering the scripts halo sends to ``bash -s``: which tools exist, servers
    started in the background, clients run in the foreground (answered from recordings)."""

    def __init__(self, name: str, tools: Sequence[str], answers: dict[str, str]) -> None:
        self.name = name
        self.tools = tools
        self.answers = answers  # client program -> recorded output
        self.started: list[list[str]] = []
        self.clients: list[list[str]] = []
        self.cleanups = 0
        self.alive = True
        self.busy_ports: set[int] = set()
        self.hang: str | None = None
        self.fails: dict[str, Result] = {}  # client program -> what it ends with instead
        self.running: dict[str, list[str]] = {}  # job name -> argv of servers still running

    def run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        timeout: float = 30.0,
        on_line: LineSink | None = None,
    ) -> Result:
        args = tuple(argv)
        if not self.alive:
            return Result(args, 255, "", "ssh: connect to host: No route to host")
        script = stdin or ""
        if args == ("true",):
            return Result(args, 0, "", "")
        if "command -v" in script:
            return Result(args, 0, "\n".join(self.tools) + "\n", "")
        if "kill -TERM" in script:
            pattern = re.search(r"halo-bench\"/\w+-(\S+)\.pid; do", script)
            assert pattern, script
            if pattern.group(1) == "*":
                self.cleanups += 1
            self.running = {
                job: argv
                for job, argv in self.running.items()
                if not fnmatch.fnmatch(job, pattern.group(1))
            }
            return Result(args, 0, "", "")
        setsid = re.search(r"^setsid timeout -k \d+ \S+ (.*) > ", script, re.M)
        if setsid:
            port = re.search(r"sport = :(\d+)", script)
            if port and int(port.group(1)) in self.busy_ports:
                return Result(args, 98, "", f"port {port.group(1)} is already in use")
            job = re.search(r"halo-bench\"/\w+-(\S+)\.pid\n", script)
            assert job, script
            self.started.append(shlex.split(setsid.group(1)))
            self.running[job.group(1)] = self.started[-1]
            return Result(args, 0, "", "")
        client = re.search(r"^exec timeout -k \d+ \S+ (.*)$", script, re.M)
        assert client, script
        words = shlex.split(client.group(1))
        self.clients.append(words)
        if words[:2] == ["sh", "-c"]:  # perftest writing JSON: sh -c SCRIPT sh REPORT argv…
            words = words[5:]
        program = words[0].rsplit("/", 1)[-1]
        key = program if program != "halo" else f"halo {words[2]}"
        if self.clients[-1][0] == "sh":
            key += " json"
        if self.hang == key:
            return Result(args, TIMED_OUT, "", "timed out after 40 s")
        if key in self.fails:
            return self.fails[key]
        return Result(args, 0, self.answers.get(key, ""), "")


def recorded(name: str) -> str:
    return (TOOLS / name).read_text()


ANSWERS = {
    "sockperf": recorded("sockperf-pingpong.txt"),
    "iperf3": recorded("iperf3-loopback.json"),
    "qperf": recorded("qperf.txt"),
    "ib_write_lat": recorded("perftest-write-lat-roce.txt"),
    "ib_write_bw": recorded("perftest-write-bw-gbits.txt"),
    "ib_write_lat json": recorded("perftest-write-lat.json"),
    "ib_write_bw json": recorded("perftest-write-bw.json"),
    "halo ping": json.dumps(
        {"tool": "builtin", "p50_us": 31.5, "p99_us": 48.0, "avg_us": 32.0, "samples": 9000}
    ),
    "halo stream": json.dumps({"tool": "builtin", "streams": 4, "gbps": 28.9}),
}


def make(
    tmp_path: Path, tools: Sequence[str] = ALL_TOOLS, **options: object
) -> tuple[NetBench, dict[str, ScriptedNode]]:
    nodes = (
        NodeConfig(
            "strix1",
            "root@192.168.1.51",
            "192.168.100.1",
            halo="/opt/halo/bin/halo",
            mgmt_address="192.168.1.51",
        ),
        NodeConfig(
            "strix2",
            "root@192.168.1.52",
            "192.168.100.2",
            halo="/opt/halo/bin/halo",
            mgmt_address="192.168.1.52",
        ),
    )
    config = Config(tmp_path / "halo.toml", "strix", "auto", nodes)
    one, two = strix_pair()
    plans = {
        "strix1": plan_transport(one, "auto", "192.168.100.2"),
        "strix2": plan_transport(two, "auto", "192.168.100.1"),
    }
    scripted = {n.name: ScriptedNode(n.name, tools, ANSWERS) for n in nodes}
    bench = NetBench(
        config,
        clients_from(config, scripted),
        plans,
        {"strix1": one, "strix2": two},
        seconds=1,
        **options,  # type: ignore[arg-type]
    )
    return bench, scripted


def test_every_path_with_the_peer_tools_and_each_nodes_own_rdma_device(tmp_path: Path) -> None:
    bench, nodes = make(tmp_path)
    result = bench.run(pairs_of(bench.config, None), ["mgmt", "fabric", "rdma"])
    assert [(p["path"], p["latency_us"]["tool"], p["bandwidth_tool"]) for p in result["paths"]] == [
        ("mgmt", "sockperf", "iperf3"),
        ("fabric", "sockperf", "iperf3"),
        ("rdma", "perftest", "perftest"),
    ]
    rdma = result["paths"][2]
    assert rdma["latency_us"] == {
        "p50": 5.23,
        "p99": 6.02,
        "avg": 5.27,
        "samples": 1000,
        "tool": "perftest",
    }
    assert rdma["bandwidth_gbps"] == 50.64
    assert rdma["line_rate_gbps"] == 100.0
    assert rdma["pct_line_rate"] == 50.6
    assert rdma["pcie_ceiling_gbps"] is not None and rdma["pct_pcie"] is not None
    # servers on the peer, clients on the node, each with its own plan's device and GID
    servers, clients = nodes["strix2"].started, nodes["strix1"].clients
    assert servers[0] == ["sockperf", "server", "--tcp", "-i", "192.168.1.52", "-p", "18600"]
    assert clients[0][:6] == ["sockperf", "ping-pong", "--tcp", "-i", "192.168.1.52", "-p"]
    lat_server = next(s for s in servers if s[0] == "ib_write_lat")
    lat_client = next(c for c in clients if c[0] == "ib_write_lat")
    assert lat_server[:3] == ["ib_write_lat", "-d", "rocep194s0"]
    assert lat_server[lat_server.index("-x") + 1] == str(bench.plans["strix2"].gid_index)
    assert lat_server[lat_server.index("-i") + 1] == "1" and "-F" in lat_server
    assert lat_client[-1] == "192.168.100.2"
    assert lat_client[lat_client.index("-x") + 1] == str(bench.plans["strix1"].gid_index)
    bw_client = next(c for c in clients if c[0] == "ib_write_bw")
    assert "--report_gbits" in bw_client
    assert nodes["strix1"].cleanups == 1 and nodes["strix2"].cleanups == 1
    assert nodes["strix2"].running == {}  # each server stopped once its client was done
    assert result["skipped"] == []


def test_missing_tools_fall_back_to_the_builtin_probe_labelled_as_such(tmp_path: Path) -> None:
    bench, nodes = make(tmp_path, tools=("sockperf",))  # only one end has iperf3: neither
    nodes["strix2"].tools = ()
    result = bench.run(pairs_of(bench.config, None), ["fabric"])
    path = result["paths"][0]
    assert path["latency_us"]["tool"] == "builtin" and path["bandwidth_tool"] == "builtin"
    assert path["latency_us"]["p50"] == 31.5 and path["bandwidth_gbps"] == 28.9
    server = nodes["strix2"].started[0]
    assert server[:6] == [
        "/opt/halo/bin/halo",
        "net-probe",
        "serve",
        "--bind",
        "192.168.100.2",
        "--port",
    ]
    assert nodes["strix1"].clients[0][:4] == [
        "/opt/halo/bin/halo",
        "net-probe",
        "ping",
        "192.168.100.2:18600",
    ]


def test_qperf_when_asked_and_a_missing_tool_is_a_usage_error(tmp_path: Path) -> None:
    bench, _nodes = make(tmp_path, latency_tool="qperf", bandwidth_tool="qperf")
    path = bench.run(pairs_of(bench.config, None), ["fabric"])["paths"][0]
    assert (path["latency_us"]["tool"], path["bandwidth_tool"]) == ("qperf", "qperf")
    bench, nodes = make(tmp_path, latency_tool="sockperf")
    nodes["strix2"].tools = ("iperf3",)
    with pytest.raises(UsageError, match="sockperf is not installed on strix2"):
        bench.run(pairs_of(bench.config, None), ["fabric"])


def test_rdma_is_skipped_with_the_reason_when_a_plan_is_tcp(tmp_path: Path) -> None:
    bench, _nodes = make(tmp_path, bandwidth=False)
    one, _two = strix_pair()
    bench.plans["strix2"] = plan_transport(one, "ethernet", "192.168.100.1")
    result = bench.run(pairs_of(bench.config, None), ["rdma"])
    assert result["paths"] == []
    assert result["skipped"] == [
        {"pair": "strix1,strix2", "path": "rdma", "reason": "strix2's plan is ethernet, not RDMA"}
    ]


def test_a_port_in_use_moves_to_the_next(tmp_path: Path) -> None:
    bench, nodes = make(tmp_path, bandwidth=False)
    nodes["strix2"].busy_ports = {18600, 18601}
    result = bench.run(pairs_of(bench.config, None), ["fabric"])
    assert result["paths"][0]["latency_us"]["tool"] == "sockperf"
    assert nodes["strix2"].started[0][-1] == "18602"


def test_a_path_that_stops_answering_ends_the_run_naming_it(tmp_path: Path) -> None:
    bench, nodes = make(tmp_path)
    nodes["strix1"].hang = "iperf3"
    with pytest.raises(BenchError, match=r"fabric path 192\.168\.100\.1 → 192\.168\.100\.2"):
        bench.run(pairs_of(bench.config, None), ["fabric"])
    # the latency measured before the path went away is kept, with the error
    (path,) = bench.result["paths"]
    assert path["latency_us"]["p50"] == 33.519 and path["bandwidth_gbps"] is None
    assert "stopped answering" in path["errors"][0]
    assert nodes["strix1"].cleanups == 1 and nodes["strix2"].cleanups == 1


# iperf3 -J's answer when it cannot reach the server: the error in its JSON (exit 0 or 1)
IPERF3_UNREACHABLE = json.dumps(
    {
        "start": {"connected": [], "version": "iperf 3.12"},
        "intervals": [],
        "end": {},
        "error": "unable to connect to server: No route to host",
    }
)


@pytest.mark.parametrize("exit_code", [0, 1])
def test_a_tool_that_reports_failure_on_a_cut_path_names_the_path(
    tmp_path: Path, exit_code: int
) -> None:
    bench, nodes = make(tmp_path)
    nodes["strix1"].fails["iperf3"] = Result((), exit_code, IPERF3_UNREACHABLE, "")
    nodes["strix1"].fails["halo ping"] = Result((), 1, "", "connect: No route to host")
    with pytest.raises(BenchError) as err:
        bench.run(pairs_of(bench.config, None), ["fabric"])
    said = (
        "iperf3 failed: unable to connect to server: No route to host"
        if exit_code == 0
        else "iperf3 on strix1: " + Result((), 1, IPERF3_UNREACHABLE, "").error_text()
    )
    assert str(err.value) == (
        "fabric path 192.168.100.1 → 192.168.100.2 (strix1 → strix2) stopped answering: "
        f"bandwidth failed ({said[:157] + '...' if len(said) > 160 else said}) and a probe "
        "got no answer"
    )
    (path,) = bench.result["paths"]
    assert path["latency_us"]["p50"] == 33.519 and path["bandwidth_gbps"] is None
    assert path["errors"] == [str(err.value)]
    # the probe: halo's own ping-pong over the same path, its server stopped again
    assert nodes["strix1"].clients[-1][:4] == [
        "/opt/halo/bin/halo", "net-probe", "ping", f"192.168.100.2:{18600 + 2}"
    ]  # fmt: skip
    assert nodes["strix2"].running == {}


def test_a_tool_that_fails_on_a_path_that_answers_keeps_its_own_words(tmp_path: Path) -> None:
    bench, nodes = make(tmp_path)
    nodes["strix1"].fails["iperf3"] = Result((), 0, IPERF3_UNREACHABLE, "")
    result = bench.run(pairs_of(bench.config, None), ["fabric"])
    (path,) = result["paths"]
    assert path["bandwidth_gbps"] is None and path["latency_us"]["p50"] == 33.519
    reason = "iperf3 failed: unable to connect to server: No route to host"
    assert path["errors"] == [f"bandwidth: {ParseError(reason, IPERF3_UNREACHABLE)}"]


def test_a_lost_node_is_named(tmp_path: Path) -> None:
    bench, nodes = make(tmp_path)
    nodes["strix2"].alive = False
    with pytest.raises(BenchError, match="strix2 does not answer"):
        bench.run(pairs_of(bench.config, None), ["fabric"])


def test_pairs_and_legs(tmp_path: Path) -> None:
    bench, _nodes = make(tmp_path)
    assert [(a.name, b.name) for a, b in pairs_of(bench.config, "strix2,strix1")] == [
        ("strix2", "strix1")
    ]
    for bad, message in (
        ("strix1", "two different node names"),
        ("strix1,strix1", "two different node names"),
        ("strix1,nope", "no node 'nope'"),
    ):
        with pytest.raises(UsageError, match=message):
            pairs_of(bench.config, bad)
    a, b = bench.config.nodes
    same = NodeConfig("x", "root@10.0.0.1", "10.0.0.1", mgmt_address="10.0.0.1")
    chosen, skipped = legs(same, b, ["mgmt", "fabric"])
    assert [leg.path for leg in chosen] == ["mgmt"]
    assert skipped[0]["reason"] == "the fabric address is the management address"
    no_fabric = NodeConfig("y", "root@10.0.0.2", None)
    assert legs(a, no_fabric, ["fabric"])[1][0]["reason"] == "no fabric_address"


def test_perftest_reports_as_json_where_it_can(tmp_path: Path) -> None:
    bench, nodes = make(tmp_path, tools=(*ALL_TOOLS, "perftest-json"))
    result = bench.run(pairs_of(bench.config, None), ["rdma"])
    (path,) = result["paths"]
    assert path["latency_us"]["p50"] == 5.23 and path["bandwidth_gbps"] == 50.64
    lat = nodes["strix1"].clients[0]
    assert lat[:2] == ["sh", "-c"] and lat[3] == "sh"
    assert lat[4].startswith("/tmp/halo-perftest-") and lat[5:8] == [
        "ib_write_lat",
        "-d",
        "rocep194s0",
    ]
    fake = tmp_path / "fake-perftest"  # prints a table, writes the report it is told to
    fake.write_text(
        "#!/bin/sh\nfor a; do case $a in --out_json_file=*) printf '{\"ok\": 1}' "
        '> "${a#--out_json_file=}";; esac; done\necho table\n'
    )
    fake.chmod(0o755)
    report = tmp_path / "r.json"
    done = subprocess.run(  # the fixed script, for real: the report is printed, then removed
        ["sh", "-c", lat[2], "sh", str(report), str(fake), "-d", "x"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout == '{"ok": 1}' and not report.exists()
