"""The cluster as commands use it: the config, one client per node, and where progress goes.
``up``, ``serve``, ``status`` and the benchmarks all start from one ``Cluster``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from halo_cluster.client.node import NodeClient, ssh_clients
from halo_cluster.config import Config, NodeConfig


def _quiet(_message: str) -> None:
    return None


@dataclass(frozen=True)
class Cluster:
    config: Config
    clients: Mapping[str, NodeClient]
    progress: Callable[[str], None] = field(default=_quiet)

    @classmethod
    def over_ssh(cls, config: Config, progress: Callable[[str], None] | None = None) -> Cluster:
        return cls(config, ssh_clients(config), progress or _quiet)

    @property
    def head(self) -> NodeConfig:
        return self.config.head

    def client(self, node: NodeConfig | str) -> NodeClient:
        return self.clients[node if isinstance(node, str) else node.name]
