"""The changes to vLLM 0.32's CPU platform, applied in every vLLM process (idempotent:
vLLM may load its plugins more than once)."""

from __future__ import annotations

import importlib.util
import logging

log = logging.getLogger("vllm.halo_vllm_cpu_ray")  # vLLM's handlers print it
COMMUNICATOR = "halo_vllm_cpu_ray.communicator.HostAwareCpuCommunicator"


def apply(resource: str) -> None:
    from vllm.platforms.cpu import CpuPlatform

    if getattr(CpuPlatform, "_halo_adapted", False):
        return
    CpuPlatform.ray_device_key = resource
    CpuPlatform.get_device_communicator_cls = classmethod(  # type: ignore[method-assign]
        lambda cls: COMMUNICATOR
    )
    if importlib.util.find_spec("ray") is not None:
        _ray_workers()
    CpuPlatform._halo_adapted = True  # type: ignore[attr-defined]
    log.debug("halo adapter: Ray device key %r, host-aware shared memory", resource)


def _ray_workers() -> None:
    """The executors name their actor classes as module globals: point those at the
    subclasses, which Ray then pickles by reference to this package (importable on every
    node of the engine environment)."""
    from vllm.v1.executor import ray_executor, ray_executor_v2

    from halo_vllm_cpu_ray import ray_workers

    ray_executor.RayWorkerWrapper = ray_workers.CpuRayWorkerWrapper  # type: ignore[misc]
    ray_executor_v2.RayWorkerProc = ray_workers.CpuRayWorkerProc  # type: ignore[misc]
