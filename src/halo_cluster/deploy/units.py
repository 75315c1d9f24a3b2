"""A replica as the bring-up serves it: the cluster narrowed to the replica's nodes (its
first node serves the API) under the replica's unit name, so that its processes, supervisor,
state file and token proof are its own. The replica binds its first node's cluster address
(the gateway on the head reaches it there) and requires the worker key."""

from __future__ import annotations

import os
from dataclasses import replace

from halo_cluster.cluster.deployments import Replica, serve_address
from halo_cluster.cluster.handle import Cluster
from halo_cluster.config import Config
from halo_cluster.gateway.worker_key import WORKER_KEY_ENV, worker_key


def unit_config(config: Config, deployment: str, replica: Replica) -> Config:
    nodes = tuple(config.node(name) for name in replica.nodes)
    serve = replace(
        config.serve, host=serve_address(nodes[0]), port=replica.port, api_key_env=WORKER_KEY_ENV
    )
    return replace(config, name=replica.unit(config.name, deployment), nodes=nodes, serve=serve)


def unit_cluster(cluster: Cluster, deployment: str, replica: Replica) -> Cluster:
    config = unit_config(cluster.config, deployment, replica)
    clients = {name: cluster.clients[name] for name in replica.nodes}
    return Cluster(config, clients, cluster.progress)


def provide_worker_key(config: Config) -> None:
    """Put the worker key where the bring-up reads a served key (``config.secret``): this
    process's environment, under its own name, for the replicas this command starts."""
    os.environ[WORKER_KEY_ENV] = worker_key(config)


def deployment_unit(config: Config, name: str, index: int = 0) -> Config:
    """Replica ``index`` of deployment ``name`` as the bring-up served it, for the commands
    that read one server (``halo logs``, ``halo bench serve``); its worker key provided. An
    unknown name or replica is one line naming the known ones."""
    from halo_cluster.cluster.state import named_deployment, read_state
    from halo_cluster.errors import UsageError

    found = named_deployment(read_state(config), name)
    replica = next((r for r in found.replicas if r.index == index), None)
    if replica is None:
        raise UsageError(
            f"deployment {name} has replicas {', '.join(str(r.index) for r in found.replicas)}, "
            f"not {index}"
        )
    provide_worker_key(config)
    return unit_config(config, name, replica)
