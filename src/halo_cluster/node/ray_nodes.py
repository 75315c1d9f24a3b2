"""The Ray node table, read on the head (the node command ``ray-nodes``): which nodes are
registered and alive, straight from the GCS when this Ray allows it, else through a
short-lived driver. Each node is the wire's ``RayNode`` (``wire/answers.py``).

Imports Ray only inside the functions: the node side must stay light."""

from __future__ import annotations

import time

from halo_cluster.errors import RayNodesError
from halo_cluster.wire.answers import RayNode


def wait_for_nodes(wanted: set[str], timeout_s: float) -> list[RayNode]:
    """The node table once every address in ``wanted`` is alive (at once when it is empty).
    Raises RayNodesError when Ray is missing, no cluster runs here, or the wait runs out."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise RayNodesError("ray is not installed in this environment") from None
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            nodes = _gcs_nodes()
        except (ConnectionError, RuntimeError, ValueError) as err:
            if not wanted or time.monotonic() > deadline:
                raise RayNodesError(f"no Ray cluster here ({err})") from None
            nodes = []
        alive = {n.address for n in nodes if n.alive}
        if wanted <= alive:
            return nodes
        if time.monotonic() > deadline:
            missing = ", ".join(sorted(wanted - alive))
            raise RayNodesError(f"not registered with Ray: {missing}")
        time.sleep(0.1)


def _gcs_nodes() -> list[RayNode]:
    """Node table straight from the GCS (no driver is registered, so it is quick); through
    a driver (ray.init) when this Ray has no such client."""
    import ray

    try:
        from ray._private.services import get_ray_address_from_environment
        from ray._raylet import GcsClient  # type: ignore[attr-defined]
    except ImportError:
        return _driver_nodes()
    address = get_ray_address_from_environment("auto", None)
    try:
        client = GcsClient(address=address)
        alive_state = ray.core.generated.gcs_pb2.GcsNodeInfo.GcsNodeState.ALIVE  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # a Ray whose private client differs: ask a driver
        return _driver_nodes()
    try:
        infos = client.get_all_node_info(timeout=10).values()
    except Exception as err:  # the client raises Ray's own RPC errors
        raise ConnectionError(str(err).splitlines()[0] if str(err) else repr(err)) from None
    return [
        RayNode(info.node_manager_address, info.state == alive_state, dict(info.resources_total))
        for info in infos
    ]


def _driver_nodes() -> list[RayNode]:
    import logging

    import ray

    ray.init(
        address="auto", logging_level=logging.ERROR, log_to_driver=False, configure_logging=False
    )
    try:
        return [
            RayNode(n["NodeManagerAddress"], bool(n["Alive"]), n["Resources"])
            for n in ray.nodes()  # type: ignore[no-untyped-call]
        ]
    finally:
        ray.shutdown()
