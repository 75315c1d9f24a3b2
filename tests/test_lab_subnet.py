"""The lab's management subnet: the first free one, chosen under a host-wide lock."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from halo_cluster.errors import LabError
from halo_cluster.lab import subnet

ADDRS = (
    "1: lo    inet 127.0.0.1/8 scope host lo\n"
    "7: hbam    inet 198.18.1.1/24 scope global hbam\n"
    "9: hbbm    inet 198.18.3.1/24 scope global hbbm\n"
    "12: eth0    inet 198.18.2.77/24 scope global eth0\n"  # a host address, not a lab's
)


def test_the_first_subnet_without_a_lab_bridge_address() -> None:
    assert subnet.free_subnet(ADDRS) == 2
    assert subnet.free_subnet("") == 1


def test_no_subnet_left_says_what_to_do() -> None:
    every = "".join(f"{i}: hb{i}m    inet 198.18.{i}.1/24\n" for i in range(1, 255))
    with pytest.raises(LabError, match="halo lab down"):
        subnet.free_subnet(every)


def test_the_claim_excludes_another_until_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subnet, "RUN_DIR", tmp_path / "run")
    monkeypatch.setattr(subnet, "LOCK_FILE", tmp_path / "run" / "subnets.lock")

    def try_claim() -> bool:
        fd = os.open(subnet.LOCK_FILE, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    with subnet.subnet_claim():
        assert not try_claim()
    assert try_claim()
