"""The load watchdog's arithmetic (issue 47, item 6): a start stalls only when no member's
log or storage reads moved for stall_s; one node waiting on another is not a stall."""

from __future__ import annotations

from halo_cluster.supervision import Progress, StallWatch, parse_progress


def answer(log: int, read: int) -> str:
    return f"alive=1\nlog_bytes={log}\nio_bytes={read}\n"


def test_any_member_moving_is_progress() -> None:
    watch = StallWatch(600)
    watch.observe(0, {"node1": answer(100, 0), "node2": answer(50, 0)})
    watch.observe(300, {"node1": answer(100, 0), "node2": answer(50, 0)})  # both wait
    watch.observe(500, {"node1": answer(100, 8 << 20), "node2": answer(50, 0)})  # node1 reads
    assert watch.stalled(1000) is None  # 500 s since node1's reads
    watch.observe(1050, {"node1": answer(100, 8 << 20), "node2": answer(50, 0)})
    assert watch.stalled(1100) == (
        "no progress for 10 min while loading: no new log line and nothing read or written "
        "on any node (node1 log 100 B, storage 8388608 B, node2 log 50 B, storage 0 B)"
    )
    watch.observe(1150, {"node1": answer(180, 8 << 20), "node2": answer(50, 0)})  # a line
    assert watch.stalled(1700) is None


def test_an_answer_that_says_nothing_is_no_progress() -> None:
    assert parse_progress("garbage\nlog_bytes=x\n") == Progress(None, None)
    watch = StallWatch(60)
    watch.observe(0, {"node1": answer(1, 1)})
    watch.observe(30, {"node1": ""})  # unreachable for a round: not a sign of life
    assert watch.stalled(61) is not None
    assert StallWatch(60).stalled(1e9) is None  # nothing observed yet
