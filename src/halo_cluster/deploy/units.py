"""A replica as the bring-up serves it: the cluster narrowed to the replica's nodes (its
first node serves the API) under the replica's unit name, so that its processes, supervisor,
state file and token proof are its own. The replica binds its first node's cluster address
(the gateway on the head reaches it there) and requires the worker key."""

from __future__ import annotations

import os
from dataclasses import replace

from halo_cluster.cluster.deployments import Replica
from halo_cluster.cluster.handle import Cluster
from halo_cluster.config import Config
from halo_cluster.gateway.worker_key import WORKER_KEY_ENV, worker_key


def unit_config(config: Config, deployment: str, replica: Replica) -> Config:
    nodes = tuple(config.node(name) for name in replica.nodes)
    serve = replace(
        config.serve, host=nodes[0].address, port=replica.port, api_key_env=WORKER_KEY_ENV
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
