"""vLLM's CPU communicator, with shared memory only among ranks of one host."""

from __future__ import annotations

import logging
import os

import torch
from vllm.distributed.device_communicators.cpu_communicator import CpuCommunicator

log = logging.getLogger("vllm.halo_vllm_cpu_ray")  # vLLM's handlers print it
# set to 1: no shared-memory all-reduce even among ranks of one host (halo lab profile runs
# tensor parallelism on one node over the transport ranks on separate hosts use)
NO_SHM = "HALO_VLLM_NO_SHM"


def shm_identity() -> str:
    """Which /dev/shm this process sees: two ranks share memory only when it is the same
    one (same boot, same filesystem). Hosts differ in boot id; containers or lab nodes on
    one kernel differ in the device of their private /dev/shm."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
    except OSError:
        boot = "?"
    try:
        st = os.stat("/dev/shm")
        where = f"{st.st_dev}:{st.st_ino}"
    except OSError:
        where = "none"
    return f"{boot}/{where}"


class HostAwareCpuCommunicator(CpuCommunicator):  # type: ignore[misc, valid-type]
    def _all_group_ranks_share_shm_group_name(self) -> bool:
        if not super()._all_group_ranks_share_shm_group_name():
            return False
        if os.environ.get(NO_SHM) == "1":
            log.info(
                "halo adapter: %s=1: group %s all-reduces over torch.distributed, as ranks "
                "on separate hosts do",
                NO_SHM,
                self.unique_name,
            )
            return False
        places: list[str] = [""] * self.world_size
        torch.distributed.all_gather_object(places, shm_identity(), group=self.device_group)
        if len(set(places)) == 1:
            return True
        log.info(
            "halo adapter: the %d ranks of group %s run on %d hosts (no shared /dev/shm): "
            "no shared-memory all-reduce",
            self.world_size,
            self.unique_name,
            len(set(places)),
        )
        return False
