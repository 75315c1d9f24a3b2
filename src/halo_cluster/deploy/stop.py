"""``halo stop NAME`` and ``halo stop``: one deployment's replicas stopped (each unit's
supervisor first, then its processes, as the bring-up stops), the deployment taken out of
the state file and the gateway told; or every deployment and the cluster's own server."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from halo_cluster.cluster.deployments import Deployment
from halo_cluster.cluster.handle import Cluster
from halo_cluster.cluster.state import named_deployment, read_state, state_path, write_state
from halo_cluster.deploy.units import unit_cluster
from halo_cluster.gateway import control as gateway
from halo_cluster.jsonout import JsonObject
from halo_cluster.serving.bringup import Serving


@dataclass
class StopResult:
    stopped: list[str] = field(default_factory=list)  # deployments stopped
    server: bool = False  # the cluster's own server ('halo serve', 'halo run' without --name)

    def to_dict(self) -> JsonObject:
        return {"stopped": self.stopped, "server": self.server}


def stop_replicas(cluster: Cluster, deployment: Deployment) -> bool:
    """Stop every replica of ``deployment``; True when one was running."""
    ran = False
    for replica in deployment.replicas:
        unit = unit_cluster(cluster, deployment.name, replica)
        ran = Serving(unit).stop() or ran
        with contextlib.suppress(OSError):
            state_path(unit.config).unlink()
    return ran


def stop_deployment(cluster: Cluster, name: str) -> StopResult:
    found = named_deployment(read_state(cluster.config), name)
    cluster.progress(f"stopping deployment {name}")
    stop_replicas(cluster, found)
    _forget(cluster, [name])
    return StopResult([name])


def stop_all(cluster: Cluster) -> StopResult:
    state = read_state(cluster.config)
    out = StopResult()
    for deployment in state.deployments if state else []:
        cluster.progress(f"stopping deployment {deployment.name}")
        stop_replicas(cluster, deployment)
        out.stopped.append(deployment.name)
    if out.stopped:
        _forget(cluster, out.stopped)
    out.server = Serving(cluster).stop()
    return out


def _forget(cluster: Cluster, names: list[str]) -> None:
    state = read_state(cluster.config)
    if state is not None:
        state.deployments = [d for d in state.deployments if d.name not in names]
        write_state(cluster.config, state)
    gateway.sync(cluster)
