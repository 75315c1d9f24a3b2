"""The halo side of bench collective / tp through a fake head: the spec reaches the driver
in its script's environment, progress lines stream, rows are kept when the run is cut, a lost
head is named; and the transport verdict from the ranks' own NCCL logs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from halo_cluster.bench.allreduce import fallback_error, transport_verdict
from halo_cluster.bench.cluster import BenchCluster, drive_remote
from halo_cluster.client.node import clients_from
from halo_cluster.config import Config, NodeConfig
from halo_cluster.errors import BenchError
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.result import Result
from tests.conftest import OUTPUTS

NCCL = OUTPUTS / "nccl"


def cluster(tmp_path: Path, head: FakeRunner) -> BenchCluster:
    nodes = (
        NodeConfig("node1", "root@10.0.0.1", "10.1.0.1", halo="/opt/halo/bin/halo"),
        NodeConfig("node2", "root@10.0.0.2", "10.1.0.2", halo="/opt/halo/bin/halo"),
    )
    config = Config(tmp_path / "halo.toml", "lab", "auto", nodes)
    return BenchCluster(
        config, clients_from(config, {"node1": head, "node2": FakeRunner()}), [], {}
    )


def events(*items: dict[str, object]) -> str:
    return "".join(json.dumps(item) + "\n" for item in items)


def test_spec_progress_and_result(tmp_path: Path) -> None:
    row = {"bytes": 8, "time_us": 30.0, "algbw_gbs": 0.0, "busbw_gbs": 0.0}
    head = FakeRunner().on(
        ["bash", "-s"],
        Result(
            (),
            0,
            "a line Ray printed\n"
            + events(
                {"event": "progress", "message": "2 ranks, gloo init"},
                {"event": "row", "row": row},
                {"event": "result", "result": {"world_size": 2, "sweep": [row]}},
            ),
            "",
        ),
    )
    seen: list[str] = []
    body = drive_remote(
        cluster(tmp_path, head), {"kind": "collective", "x": "a'b"}, 60, seen.append
    )
    assert body == {"world_size": 2, "sweep": [row]}
    assert seen == ["2 ranks, gloo init"]
    script = head.stdins[0] or ""
    exported = next(line for line in script.splitlines() if "HALO_BENCH_SPEC" in line)
    spec = json.loads(shlex.split(exported.split("=", 1)[1])[0])
    assert spec["kind"] == "collective" and spec["x"] == "a'b" and spec["run_id"]
    assert "exec timeout -k 2 60 /opt/halo/bin/halo bench-driver" in script
    assert any("kill -TERM" in (s or "") for s in head.stdins[1:])  # cleaned up


def test_a_cut_run_keeps_its_rows_and_names_the_node(tmp_path: Path) -> None:
    row = {"bytes": 8, "time_us": 30.0, "algbw_gbs": 0.0, "busbw_gbs": 0.0}
    message = "all-reduce of 16B did not finish within 10 s: node2 (10.1.0.2) does not answer"
    head = FakeRunner().on(
        ["bash", "-s"],
        Result(
            (), 1, events({"event": "row", "row": row}, {"event": "error", "message": message}), ""
        ),
    )
    with pytest.raises(BenchError, match=r"node2 \(10\.1\.0\.2\) does not answer") as raised:
        drive_remote(cluster(tmp_path, head), {"kind": "collective"}, 60, lambda _m: None)
    assert raised.value.partial == [row]  # type: ignore[attr-defined]


def test_a_lost_head_is_named(tmp_path: Path) -> None:
    head = FakeRunner().on(["bash", "-s"], Result((), 255, "", "ssh: connect: No route to host"))
    head.on(["true"], Result((), 255, "", "ssh: connect: No route to host"))
    with pytest.raises(BenchError, match="lost the head node1: ssh: connect: No route to host"):
        drive_remote(cluster(tmp_path, head), {"kind": "tp"}, 60, lambda _m: None)


def test_verdict_from_the_ranks_own_nccl_logs() -> None:
    roce, socket = (NCCL / "rank0-roce.log").read_text(), (NCCL / "rank1-socket.log").read_text()
    mixed = transport_verdict("nccl", [{}, {}], [roce, socket])
    assert mixed["backend"] == "nccl" and mixed["transport"] == "mixed"
    assert fallback_error(True, mixed) is not None and "mixed" in (
        fallback_error(True, mixed) or ""
    )
    fallback = transport_verdict("nccl", [{}], [(NCCL / "nccl-socket-fallback.log").read_text()])
    assert fallback["transport"] == "socket"
    refusal = fallback_error(True, fallback)
    assert refusal and refusal.startswith("the plan asked for RDMA but NCCL used socket (")
    assert fallback_error(False, fallback) is None  # TCP was the plan
    good = transport_verdict("nccl", [{}], [(NCCL / "rccl-roce-2rank.log").read_text()])
    assert good["transport"] == "roce" and fallback_error(True, good) is None
    gloo = transport_verdict("gloo", [{"env": {"GLOO_SOCKET_IFNAME": "enp194s0np0"}}, {}], [])
    assert gloo == {
        "backend": "gloo",
        "transport": "socket",
        "interfaces": ["enp194s0np0", None],
        "evidence": [
            "rank 0: GLOO_SOCKET_IFNAME=enp194s0np0",
            "rank 1: GLOO_SOCKET_IFNAME=(unset: Gloo picks an interface)",
        ],
    }
    assert fallback_error(True, gloo) is None
