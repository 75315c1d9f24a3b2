"""fan_out / each: results in item order whatever order the work ends in, every item's own
error kept, never more than ``limit`` items at once (counted, not timed), and Ctrl-C stops
the caller without waiting for the items still running."""

from __future__ import annotations

import signal
import threading

import pytest

from halo_cluster.client.fanout import Outcome, each, fan_out

WAIT_S = 10.0  # only a guard against a hang: every wait below is released by an event


def test_results_keep_the_order_of_the_items() -> None:
    """Each item waits for the next one to finish: the last item ends first."""
    count = 6
    done = [threading.Event() for _ in range(count)]

    def work(i: int) -> str:
        if i + 1 < count:
            assert done[i + 1].wait(WAIT_S)
        done[i].set()
        return f"item {i}"

    assert each(range(count), work, limit=count) == [f"item {i}" for i in range(count)]


def test_every_items_error_is_kept() -> None:
    def work(i: int) -> int:
        if i % 3 == 1:
            raise ValueError(f"bad {i}")
        return i * 10

    outcomes = fan_out(range(6), work, limit=2)
    assert [(o.item, o.value, str(o.error) if o.error else None) for o in outcomes] == [
        (0, 0, None),
        (1, None, "bad 1"),
        (2, 20, None),
        (3, 30, None),
        (4, None, "bad 4"),
        (5, 50, None),
    ]
    assert [o.ok for o in outcomes] == [True, False, True, True, False, True]


def test_never_more_than_the_limit_at_once() -> None:
    """Items meet in groups of ``limit`` at a barrier: fewer at once would never pass it
    (BrokenBarrierError), more at once would show in the peak count."""
    limit = 3
    barrier = threading.Barrier(limit, timeout=WAIT_S)
    lock = threading.Lock()
    running, peak = 0, 0

    def work(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        barrier.wait()
        with lock:
            running -= 1
        return i

    assert each(range(4 * limit), work, limit=limit) == list(range(4 * limit))
    assert peak == limit
    assert each(range(3), work, limit=limit) == [0, 1, 2]  # fewer items than the limit


def test_each_raises_the_first_items_error_after_all_finished() -> None:
    finished: list[int] = []
    lock = threading.Lock()

    def work(i: int) -> int:
        with lock:
            finished.append(i)
        if i in (4, 2):
            raise RuntimeError(f"node {i} lost")
        return i

    with pytest.raises(RuntimeError, match="node 2 lost"):
        each(range(8), work, limit=3)
    assert sorted(finished) == list(range(8))


def test_no_items_and_one_item() -> None:
    assert fan_out([], lambda i: i) == [] and each([], lambda i: i) == []
    assert fan_out(["a"], str.upper) == [Outcome("a", "A")]
    with pytest.raises(ValueError, match="limit must be at least 1"):
        fan_out([1], lambda i: i, limit=0)


def test_ctrl_c_stops_the_caller_without_waiting() -> None:
    """SIGINT reaches the caller once two items run (and block): it raises KeyboardInterrupt
    at once, without waiting for them, and the items not started never run."""
    release = threading.Event()
    guard = threading.Timer(WAIT_S, release.set)  # never hang, whatever fan_out does
    started: list[int] = []
    running = threading.Event()
    main = threading.main_thread().ident
    assert main is not None

    def work(i: int) -> int:
        started.append(i)
        if len(started) == 2:
            running.set()
        release.wait()
        return i

    def ctrl_c() -> None:
        if running.wait(WAIT_S):
            signal.pthread_kill(main, signal.SIGINT)

    sender = threading.Thread(target=ctrl_c)
    guard.start()
    sender.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            fan_out(range(20), work, limit=2)
        assert not release.is_set()  # it did not wait for the blocked items
    finally:
        release.set()
        guard.cancel()
        sender.join()
    assert sorted(started) == [0, 1]  # the two that were running; the rest were dropped
