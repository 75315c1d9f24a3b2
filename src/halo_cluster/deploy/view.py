"""Each deployment as 'halo status' and 'halo top' show it: its replicas, each with its
nodes, URL, health (asked on its first node, as the bring-up asks) and its supervisor's
state; the deployment ``serving`` when every replica is, ``degraded`` when some are,
``failed`` when none is."""

from __future__ import annotations

from typing import Any

from halo_cluster.cluster.deployments import Deployment, serve_address
from halo_cluster.cluster.handle import Cluster
from halo_cluster.cluster.state import read_state
from halo_cluster.deploy.units import provide_worker_key, unit_cluster
from halo_cluster.serving.status import serve_health


def deployment_state(replica_states: list[str]) -> str:
    up = replica_states.count("serving")
    return "serving" if up == len(replica_states) else "degraded" if up else "failed"


def deployments_view(cluster: Cluster) -> list[dict[str, Any]]:
    state = read_state(cluster.config)
    if state is None or not state.deployments:
        return []
    provide_worker_key(cluster.config)
    return [_one(cluster, d) for d in state.deployments]


def _one(cluster: Cluster, deployment: Deployment) -> dict[str, Any]:
    replicas: list[dict[str, Any]] = []
    for replica in deployment.replicas:
        unit = unit_cluster(cluster, deployment.name, replica)
        health = serve_health(unit, read_state(unit.config), []) or {}
        supervisor = health.get("supervisor") or {}
        healthy = bool(health.get("healthy"))
        replicas.append(
            {
                "index": replica.index,
                "nodes": list(replica.nodes),
                "url": replica.url(serve_address(cluster.config.node(replica.nodes[0]))),
                "state": "serving" if healthy else supervisor.get("state") or "down",
                "proven": health.get("proven"),
                "restarts": supervisor.get("restarts"),
                "detail": health.get("detail"),
            }
        )
    return {
        "name": deployment.name,
        "model": deployment.model,
        "engine": deployment.engine,
        "layout": deployment.layout,
        "aliases": list(deployment.aliases),
        "state": deployment_state([str(r["state"]) for r in replicas]),
        "replicas": replicas,
    }
