"""Log verdicts on recorded NCCL/RCCL logs; the verify-log command's exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.witness.nccl_log import parse_log, parse_logs
from tests.conftest import OUTPUTS

LOGS = OUTPUTS / "nccl"


def verdict_of(*names: str) -> dict[str, object]:
    sources = [(name, (LOGS / name).read_text(errors="replace").splitlines()) for name in names]
    return parse_logs(sources).to_dict()


def test_rccl_roce_two_ranks_interleaved() -> None:
    assert verdict_of("rccl-roce-2rank.log") == {
        "transport": "roce",
        "networks": {"strix1:41871": "IB", "strix2:39120": "IB"},
        "hcas": ["rocep194s0:1"],
        "gdr": False,
        "nccl_version": "2.22.3+hip6.4",
        "ranks_seen": 2,
        "evidence": [
            "strix1:41871:41990 [0] NCCL INFO NET/IB : Using [0]rocep194s0:1/RoCE ; OOB enp194s0np0:192.168.100.1<0>",
            "strix2:39120:39201 [0] NCCL INFO NET/IB : Using [0]rocep194s0:1/RoCE ; OOB enp194s0np0:192.168.100.2<0>",
            "strix1:41871:41990 [0] NCCL INFO Using network IB",
            "strix2:39120:39201 [0] NCCL INFO Using network IB",
            "strix1:41871:41990 [0] NCCL INFO Channel 00/02 : 0[0] -> 1[0] [send] via NET/IB/0",
            "strix2:39120:39201 [0] NCCL INFO Channel 00/02 : 0[0] -> 1[0] [receive] via NET/IB/0",
        ],
    }


def test_socket_fallback() -> None:
    verdict = verdict_of("nccl-socket-fallback.log")
    assert verdict["transport"] == "socket"
    assert verdict["networks"] == {"esm2-worker-0:53": "Socket"}
    assert verdict["nccl_version"] == "2.21.5+cuda12.4" and verdict["gdr"] is False
    assert (
        "esm2-worker-0:53:271 [0] NCCL INFO Failed to initialize NET plugin IB"
        in verdict["evidence"]
    )  # type: ignore[operator]


def test_infiniband_with_gpudirect() -> None:
    verdict = verdict_of("nccl-infiniband-gdr.log")
    assert (verdict["transport"], verdict["hcas"], verdict["gdr"]) == (
        "infiniband",
        ["mlx5_0:1"],
        True,
    )


def test_ranks_in_separate_files_that_disagree_are_mixed() -> None:
    verdict = verdict_of("rank0-roce.log", "rank1-socket.log")
    assert verdict["transport"] == "mixed"
    assert verdict["networks"] == {"strix1:100": "IB", "strix2:200": "Socket"}
    assert verdict["nccl_version"] == "2.20.5+hip6.2"


def test_old_ring_format_without_using_network() -> None:
    verdict = verdict_of("old-ring-format.log")
    assert (verdict["transport"], verdict["nccl_version"]) == ("socket", "2.4.8+cuda10.1")


@pytest.mark.parametrize("name", ["truncated.log", "no-transport.log"])
def test_truncated_and_garbage_say_unknown(name: str) -> None:
    assert verdict_of(name)["transport"] == "unknown"


def test_lines_without_prefix_count_per_source() -> None:
    text = "NCCL INFO Using network Socket\nNCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
    verdict = parse_logs([("a.log", text.splitlines()), ("b.log", ["NCCL INFO Using network IB"])])
    assert verdict.networks == {"a.log": "Socket", "b.log": "IB"}
    assert verdict.transport == "mixed"


def test_ib_network_without_link_layer_line_is_rdma() -> None:
    verdict = parse_log("h:1:1 [0] NCCL INFO Using network IB\n")
    assert verdict.transport == "rdma" and verdict.meets("rdma") and not verdict.meets("roce")


@given(st.lists(st.text(max_size=120), max_size=30))
def test_never_crashes(lines: list[str]) -> None:
    verdict = parse_logs([("x", lines)])
    assert verdict.transport in {"roce", "infiniband", "rdma", "socket", "mixed", "unknown"}


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "halo_cluster", "verify-log", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("files", "expect", "code"),
    [
        (["rccl-roce-2rank.log"], "roce", 0),
        (["rccl-roce-2rank.log"], "rdma", 0),
        (["rccl-roce-2rank.log"], "infiniband", 1),
        (["nccl-socket-fallback.log"], "roce", 1),
        (["nccl-socket-fallback.log"], "socket", 0),
        (["rank0-roce.log", "rank1-socket.log"], "roce", 1),
        (["rank0-roce.log", "rank1-socket.log"], None, 1),
        (["no-transport.log"], "roce", 3),
        (["truncated.log"], None, 3),
        (["nccl-infiniband-gdr.log"], None, 0),
    ],
)
def test_exit_codes(files: list[str], expect: str | None, code: int) -> None:
    args = [str(LOGS / f) for f in files] + (["--expect", expect] if expect else [])
    result = run(*args)
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_stdin_and_json() -> None:
    import json

    result = run(
        "-", "--json", "--expect", "socket", stdin=(LOGS / "nccl-socket-fallback.log").read_text()
    )
    data = json.loads(result.stdout)
    assert result.returncode == 0 and data["ok"] is True and data["transport"] == "socket"


def test_missing_file_is_usage_error() -> None:
    result = run("/nonexistent/log.txt")
    assert result.returncode == 2 and "cannot read log" in result.stderr


def test_verify_log_streams_huge_files_and_ignores_absurd_ranks(tmp_path: Path) -> None:
    """A log far larger than any line limit, a 5000-digit rank and a 3 MB line: a verdict,
    never a traceback, in bounded memory (the file is read line by line)."""
    from tests.conftest import halo

    log = tmp_path / "huge.log"
    with log.open("w") as handle:
        handle.write("NCCL INFO rank " + "9" * 5000 + " nranks 2\n")
        handle.write("x" * 3_000_000 + "\n")
        for i in range(20_000):
            handle.write(
                f"h:1:2 [0] NCCL INFO Channel 00/02 : {i % 2}[0] -> {(i + 1) % 2}[0] "
                "[send] via NET/Socket/0\n"
            )
    done = halo("verify-log", str(log), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["transport"], data["ranks_seen"]) == ("socket", 2)
