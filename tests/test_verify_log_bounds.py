"""verify-log never reads without end: a device is refused, and an endless stream without
newlines (a pipe from /dev/zero) stops at the bound with one line."""

from __future__ import annotations

import os
import threading

import pytest

from halo_cluster.cli import transport
from halo_cluster.errors import UsageError
from tests.conftest import halo


def test_a_device_is_not_a_log() -> None:
    done = halo("verify-log", "/dev/zero", timeout=30)
    assert (done.returncode, done.stderr) == (
        2,
        "halo: error: cannot read log /dev/zero: a device or directory, not a log\n",
    )


def test_an_endless_line_stops_at_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "MAX_LOG", 1 << 20)
    read_end, write_end = os.pipe()

    def feed() -> None:  # zeros until the reader closes its end
        try:
            while True:
                os.write(write_end, b"\0" * 65536)
        except OSError:
            pass
        finally:
            os.close(write_end)

    threading.Thread(target=feed, daemon=True).start()
    with os.fdopen(read_end, "rb") as handle, pytest.raises(UsageError) as caught:
        list(transport._lines(handle, "pipe"))
    assert str(caught.value) == (
        "log pipe: more than 1 MiB read; give the ranks' logs written with "
        "NCCL_DEBUG_SUBSYS=INIT,NET"
    )
