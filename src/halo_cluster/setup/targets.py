"""The machines ``halo setup`` plans for and changes, named as the plan names them (hostname
and address), and whether this machine is one of the cluster config's nodes.

With a cluster config, setup's machines are its nodes, reached over SSH (``setup/nodes.py``);
``--local`` (or no config) is this machine, which must be a node of the config, when there is
one, for ``--apply`` to change it without ``--yes``."""

from __future__ import annotations

from dataclasses import dataclass

from halo_cluster.config import Config
from halo_cluster.facts.model import Inventory
from halo_cluster.jsonout import JsonObject
from halo_cluster.printable import printable

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
# an address people recognise a machine by: a wired or wireless port's before a bridge's
PHYSICAL_KINDS = ("ethernet", "infiniband", "wireless", "thunderbolt")


@dataclass(frozen=True)
class Machine:
    """One machine that setup plans for: ``name`` is the key of its entry in the JSON (the
    node's name in the config; this machine: its hostname); ``hostname`` as the machine
    reports itself (None: it did not answer); ``address`` where halo reaches it (a node's SSH
    host; this machine: its first IPv4 address); ``node`` the config's node it is (None: not
    a node of the config, or no config)."""

    name: str
    hostname: str | None
    address: str | None
    node: str | None

    def label(self) -> str:
        """``strix1 (host strix1-box, 192.168.1.51)``, for people; node data made printable."""
        said = [f"host {printable(self.hostname, limit=64)}" if self.hostname else "host unknown"]
        if self.address:
            said.append(printable(self.address, limit=64))
        return f"{printable(self.name, limit=64)} ({', '.join(said)})"

    def to_dict(self) -> JsonObject:
        return {"hostname": self.hostname, "address": self.address, "node": self.node}


def addresses(inv: Inventory) -> list[str]:
    """This machine's IPv4 addresses without their prefix, loopback left out; a physical
    port's first."""
    ranked = sorted(
        (n for n in inv.net if n.kind != "loopback"), key=lambda n: n.kind not in PHYSICAL_KINDS
    )
    return [a.split("/", 1)[0] for n in ranked for a in n.ipv4 if not a.startswith("127.")]


def node_of(inv: Inventory, config: Config) -> str | None:
    """The config's node that this machine is: one whose name or SSH host is this hostname
    (short or full), or whose SSH host, management or fabric address is one of this
    machine's addresses; None when none is."""
    names = {inv.hostname, (inv.hostname or "").split(".", 1)[0]} - {None, ""}
    mine = set(addresses(inv))
    for node in config.nodes:
        said = {node.name, node.host, node.host.split(".", 1)[0]}
        if said & names or node.host in LOOPBACK_HOSTS:
            return node.name
        if {node.host, node.mgmt_address, node.fabric_address} & mine:
            return node.name
    return None


def this_machine(inv: Inventory, config: Config | None) -> Machine:
    """This machine (or the one whose files are below ``--root``), and the config's node it
    is, when there is a config."""
    found = addresses(inv)
    return Machine(
        inv.hostname or "local",
        inv.hostname,
        found[0] if found else None,
        node_of(inv, config) if config is not None else None,
    )


def node_machine(config: Config, name: str, hostname: str | None) -> Machine:
    """The config's node ``name``, reached at its SSH host, with the hostname it gave."""
    return Machine(name, hostname, config.node(name).host, name)
