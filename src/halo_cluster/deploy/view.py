"""Each deployment as 'halo status' shows it: its replicas, each with its nodes, URL,
health (asked on its first node, as the bring-up asks) and its supervisor's state; the
deployment ``serving`` when every replica is, ``degraded`` when some are, ``failed`` when
none is."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from halo_cluster.cluster.deployments import Deployment, serve_address
from halo_cluster.cluster.handle import Cluster
from halo_cluster.cluster.state import named_deployment, read_state
from halo_cluster.deploy.units import provide_worker_key, unit_cluster
from halo_cluster.jsonout import JsonObject
from halo_cluster.serving.status import serve_health


@dataclass(frozen=True)
class ReplicaView:
    index: int
    nodes: list[str]
    url: str
    state: str  # "serving", else the supervisor's state ("restarting", "failed"), or "down"
    proven: str | None
    restarts: int | None
    detail: str | None


@dataclass(frozen=True)
class DeploymentView:
    name: str
    model: str
    engine: str
    layout: str
    aliases: list[str]
    replicas: list[ReplicaView]

    @property
    def state(self) -> str:
        return deployment_state([r.state for r in self.replicas])

    def to_dict(self) -> JsonObject:
        return {**asdict(self), "state": self.state}


def deployment_state(replica_states: list[str]) -> str:
    up = replica_states.count("serving")
    return "serving" if up == len(replica_states) else "degraded" if up else "failed"


def deployments_view(cluster: Cluster, name: str | None = None) -> list[DeploymentView]:
    """Every deployment as it is now, or only ``name`` (an unknown name is one line)."""
    state = read_state(cluster.config)
    chosen = [named_deployment(state, name)] if name else state.deployments if state else []
    if not chosen:
        return []
    provide_worker_key(cluster.config)
    return [_one(cluster, d) for d in chosen]


def _one(cluster: Cluster, deployment: Deployment) -> DeploymentView:
    replicas = []
    for replica in deployment.replicas:
        unit = unit_cluster(cluster, deployment.name, replica)
        health = serve_health(unit, read_state(unit.config), []) or {}
        supervisor = health.get("supervisor") or {}
        replicas.append(
            ReplicaView(
                replica.index,
                list(replica.nodes),
                replica.url(serve_address(cluster.config.node(replica.nodes[0]))),
                "serving" if health.get("healthy") else supervisor.get("state") or "down",
                health.get("proven"),
                supervisor.get("restarts"),
                health.get("detail"),
            )
        )
    return DeploymentView(
        deployment.name,
        deployment.model,
        deployment.engine,
        deployment.layout,
        list(deployment.aliases),
        replicas,
    )
