"""halo's adapter for vLLM's CPU build, loaded by vLLM as a general plugin in each of its
processes (API server, engine core, every worker).

It does two things, and nothing more:

1. **Ray on CPU nodes.** vLLM 0.32 gives its CPU platform no Ray device key, so the Ray
   executors refuse it ("current platform cpu does not support ray"). halo's ``up``
   declares a custom Ray resource on every CPU-only node (``RESOURCE``); the plugin makes it
   the CPU platform's device key, so placement treats one unit of it as one rank, as it
   treats a GPU. The Ray worker actors ask Ray for the ids of their "GPUs", which a custom
   resource does not have: the actor classes are replaced by subclasses (in
   ``halo_vllm_cpu_ray.ray_workers``, importable on every node, since Ray pickles an actor
   class by reference) that answer with the rank's index on its node.
2. **Shared memory only within one host.** vLLM's CPU communicator picks its
   shared-memory all-reduce when the ranks agree on a group *name*, even when they run on
   different hosts (it then fails: "open shm in SHMManager failed"). The plugin's
   communicator also compares where each rank's ``/dev/shm`` is: shared memory only when
   every rank sees the same one, otherwise ``torch.distributed`` (Gloo over the fabric).

vLLM's console script also needs distribution metadata named ``vllm``; that alias is a
separate metadata-only distribution installed next to this one (``../alias``).

The plugin was written against one vLLM release and refuses any other: the internals it
touches move between releases.
"""

from __future__ import annotations

import logging

SUPPORTED_VLLM = "0.32.0"
RESOURCE = "vllm_cpu"  # the custom Ray resource halo up declares on CPU-only nodes

log = logging.getLogger("vllm.halo_vllm_cpu_ray")  # vLLM's handlers print it


class UnsupportedVllm(RuntimeError):
    """The installed vLLM is not the release this adapter was written for."""


def check_version(version: str) -> None:
    base = version.split("+", 1)[0]
    if base != SUPPORTED_VLLM:
        raise UnsupportedVllm(
            f"halo-vllm-cpu-ray was written for vLLM {SUPPORTED_VLLM} and refuses vLLM "
            f"{version}: install the engine environment halo pins ('make engine'), or "
            "uninstall halo-vllm-cpu-ray to run this vLLM without halo's adapter"
        )


def register() -> None:
    """vLLM's entry point (``vllm.general_plugins``)."""
    import vllm

    check_version(vllm.__version__)
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from halo_vllm_cpu_ray import patches

    patches.apply(RESOURCE)
