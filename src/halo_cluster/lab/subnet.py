"""A lab's management subnet, 198.18.X.0/24, chosen so that no two labs on the host share
one.

A subnet is in use while some bridge carries its host address (198.18.X.1). Between the
choice and the bridge's address two 'halo lab up' runs could pick the same X, and then the
host routes one lab's nodes into the other's bridge; so the choice is made holding an
exclusive lock on a file under /run, and the lock is released only once the address is on
the new lab's bridge.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from halo_cluster.errors import LabError
from halo_cluster.lab.state import MGMT_NET, RUN_DIR

LOCK_FILE = RUN_DIR / "subnets.lock"


def free_subnet(addresses: str) -> int:
    """The first X whose host address is not in ``addresses`` (``ip -o -4 addr show``)."""
    for subnet in range(1, 255):
        if f" {MGMT_NET}.{subnet}.1/" not in addresses:
            return subnet
    raise LabError(f"no free {MGMT_NET}.X.0/24 subnet left: remove old labs with 'halo lab down'")


@contextmanager
def subnet_claim() -> Iterator[None]:
    """Held from choosing a subnet until its address is on the lab's bridge; waits for
    another lab's 'up' to get that far (a few commands, well under a second)."""
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
