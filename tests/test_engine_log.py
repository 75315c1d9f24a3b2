"""vLLM's own start-up lines -> the engine verdict, on logs recorded in the lab (TP=2 across
two nodes, Ray and vLLM's own executor), and never a crash on any text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.witness.engine_log import (
    EngineVerdict,
    check_ranks,
    clean,
    parse_engine_logs,
    rank_nodes,
)
from tests.conftest import OUTPUTS

VLLM = OUTPUTS / "vllm"
ADDRESSES = {"node1": "198.19.1.11", "node2": "198.19.1.12"}


def lines(name: str) -> list[str]:
    return (VLLM / name).read_text().splitlines()


def test_ray_executor_log_names_each_rank_and_its_node() -> None:
    verdict = parse_engine_logs([("head", "198.19.1.11", lines("ray-tp2-head.log"))])
    data = verdict.to_dict()
    evidence = data.pop("evidence")
    assert data == {
        "backend": "gloo",
        "init_address": "198.19.1.11",
        "init_port": 33891,
        "world_size": 2,
        "ranks": [
            {
                "rank": 0,
                "world_size": 2,
                "backend": "gloo",
                "init_method": "tcp://198.19.1.11:33891",
                "address": "198.19.1.11",
                "source": "head",
            },
            {
                "rank": 1,
                "world_size": 2,
                "backend": "gloo",
                "init_method": "tcp://198.19.1.11:33891",
                "address": "198.19.1.12",
                "source": "head",
            },
        ],
        "shm_fallback": True,
        "complete": True,
    }
    assert evidence[0].startswith("(CpuRayWorkerProc pid=1002) (Worker pid=1002) INFO")
    assert evidence[1].startswith("(CpuRayWorkerProc pid=476, ip=198.19.1.12)")
    assert "halo adapter: the 2 ranks of group tp:0 run on 2 hosts" in evidence[2]
    assert check_ranks(verdict, "198.19.1.11", ADDRESSES) == []
    assert rank_nodes(verdict, ADDRESSES, "node1") == {0: "node1", 1: "node2"}


def test_mp_executor_logs_one_per_node() -> None:
    verdict = parse_engine_logs(
        [
            ("node1", "198.19.1.11", lines("mp-tp2-node1.log")),
            ("node2", "198.19.1.12", lines("mp-tp2-node2.log")),
        ]
    )
    assert (verdict.backend, verdict.init_address, verdict.init_port) == (
        "gloo",
        "198.19.1.11",
        29517,
    )
    assert [(r.rank, r.address, r.source) for r in verdict.ranks] == [
        (0, "198.19.1.11", "node1"),
        (1, "198.19.1.12", "node2"),
    ]
    assert verdict.complete and verdict.shm_fallback
    assert check_ranks(verdict, "198.19.1.11", ADDRESSES) == []


def test_ranks_on_the_wrong_network_are_named() -> None:
    text = [
        "(Worker pid=1) INFO world_size=2 rank=0 local_rank=0 "
        "distributed_init_method=tcp://198.18.1.11:5000 backend=gloo",
        "(RayWorkerWrapper pid=2, ip=198.18.1.12) INFO world_size=2 rank=1 local_rank=0 "
        "distributed_init_method=tcp://198.18.1.11:5000 backend=gloo",
    ]
    verdict = parse_engine_logs([("head", None, text)])
    assert check_ranks(verdict, "198.19.1.11", ADDRESSES, "198.19.1.11") == [
        "the ranks met at 198.18.1.11, not at the head's planned fabric address 198.19.1.11",
        "rank 1 ran at 198.18.1.12, which is no node's planned fabric address",
    ]


def test_a_missing_rank_and_no_ranks_at_all() -> None:
    half = parse_engine_logs([("node1", "198.19.1.11", lines("mp-tp2-node1.log"))])
    assert not half.complete
    assert check_ranks(half, "198.19.1.11", ADDRESSES) == ["the log shows ranks 0 of 2 only"]
    empty = parse_engine_logs([("head", None, ["INFO nothing here"])])
    assert empty == EngineVerdict(None, None, None, None, (), False, ())
    assert check_ranks(empty, "198.19.1.11", ADDRESSES) == [
        "the engine's log shows no rank starting (no 'world_size=… backend=…' line)"
    ]


def test_ansi_colour_of_ray_prefixes_is_removed() -> None:
    assert clean("\x1b[36m(CpuRayWorkerProc pid=9, ip=10.0.0.2)\x1b[0m x\r\n") == (
        "(CpuRayWorkerProc pid=9, ip=10.0.0.2) x"
    )


@given(st.lists(st.text(max_size=200), max_size=30))
def test_any_text_gives_a_verdict(text: list[str]) -> None:
    verdict = parse_engine_logs([("x", None, text)])
    assert isinstance(verdict.to_dict(), dict)
    check_ranks(verdict, "198.19.1.11", ADDRESSES)
