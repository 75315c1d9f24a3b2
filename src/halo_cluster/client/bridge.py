"""bridge (temporary): NodeClients for the modules that still take runners and put a node's
``exec_prefix`` before argv by hand — ``cluster/lifecycle.py``, ``cluster/serve.py``,
``cluster/llama_server.py`` and ``cluster/proof.py``, until the engines rewrite makes them take
clients. Delete this module then.

A client's runner adds the prefix itself, so handing it to them would put it there twice.
``HandPrefixed`` takes their prefix off again and runs the rest through the client (node
code sent when needed, as before); ``as_clients`` turns what ``Lifecycle`` hands
``cluster.gather.gather`` back into clients.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from halo_cluster.client.node import NodeClient, node_client
from halo_cluster.config import Config
from halo_cluster.runner.result import LineSink, Result, Runner


@dataclass(frozen=True)
class HandPrefixed:
    """A Runner over ``client`` for argv that already starts with the node's exec_prefix;
    argv without it (none is sent today) runs on the host, as it did before clients."""

    client: NodeClient

    def run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        timeout: float = 30.0,
        on_line: LineSink | None = None,
    ) -> Result:
        prefix = list(self.client.node.exec_prefix)
        args = list(argv)
        if args[: len(prefix)] == prefix:
            return self.client.run(args[len(prefix) :], stdin, timeout, on_line)
        return self.client.host_runner.run(args, stdin, timeout, on_line)


def hand_prefixed(clients: Mapping[str, NodeClient]) -> dict[str, Runner]:
    """The runners to give ``Lifecycle`` (and through it ``Server``, ``proof``) today."""
    return {name: HandPrefixed(client) for name, client in clients.items()}


def as_clients(
    config: Config, given: Mapping[str, NodeClient] | Mapping[str, Runner]
) -> dict[str, NodeClient]:
    """Clients for the nodes of ``given``: clients as they are, ``HandPrefixed`` runners'
    own clients, and a plain runner (a test's FakeRunner given to ``Lifecycle``) as the
    connection of a new client."""
    clients = {}
    for node in config.nodes:
        value = given.get(node.name)
        if isinstance(value, NodeClient):
            clients[node.name] = value
        elif isinstance(value, HandPrefixed):
            clients[node.name] = value.client
        elif value is not None:
            clients[node.name] = node_client(node, value)
    return clients
