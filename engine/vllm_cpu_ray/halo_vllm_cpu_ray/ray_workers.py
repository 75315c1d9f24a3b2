"""Ray worker actors for CPU ranks. vLLM asks each actor for the ids of the accelerators
Ray gave it; a custom resource has none. The executors derive each rank's local rank from
the order of the actors, and use these ids only as labels, so a CPU rank answers with its
own process id: unique on its node, which is all the executors need of it."""

from __future__ import annotations

import os

import ray
from vllm.v1.executor.ray_executor_v2 import RayWorkerProc
from vllm.v1.executor.ray_utils import RayWorkerWrapper


def node_and_ids() -> tuple[str, list[int]]:
    return ray.get_runtime_context().get_node_id(), [os.getpid()]


class CpuRayWorkerWrapper(RayWorkerWrapper):  # type: ignore[misc, valid-type]
    def get_node_and_physical_gpu_ids(self) -> tuple[str, list[int]]:
        return node_and_ids()


class CpuRayWorkerProc(RayWorkerProc):  # type: ignore[misc, valid-type]
    def get_node_and_physical_gpu_ids(self) -> tuple[str, list[int]]:
        return node_and_ids()
