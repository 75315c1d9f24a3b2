"""The exporter as a systemd unit on every node, without halo installed there: the unit runs
halo's node code (the zipapp, copied to ``/var/lib/halo/node-HASH.pyz``, which checks itself
against the hash in its name before it runs) with the node's own peers and addresses."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from halo_cluster.client.fanout import fan_out
from halo_cluster.client.node import NodeClient
from halo_cluster.config import Config, NodeConfig
from halo_cluster.jsonout import JsonObject
from halo_cluster.nodecode import NodeCode
from halo_cluster.runner.daemon import NONE, Daemon, install_script
from halo_cluster.wire.args import exporter_args

UNIT_NAME = "halo-exporter.service"
CODE_DIR = "/var/lib/halo"


@dataclass(frozen=True)
class ExporterUnit:
    node: str
    daemon: Daemon
    code_path: str

    @property
    def argv(self) -> tuple[str, ...]:
        return self.daemon.argv

    @property
    def unit(self) -> str:
        """The unit file, as installed."""
        return self.daemon.text()

    def to_dict(self) -> JsonObject:
        return {
            "node": self.node,
            "argv": list(self.argv),
            "unit": self.unit,
            "code": self.code_path,
        }


def listen_address(node: NodeConfig, on: str) -> str:
    """Where the node's exporter listens: 127.0.0.1 (the default: scraped through SSH or a
    local Prometheus), or its management or fabric address when asked."""
    if on == "mgmt":
        return node.mgmt_address or node.host
    if on == "fabric":
        return node.address
    return "127.0.0.1"


def exporter_argv(
    config: Config, node: NodeConfig, code: NodeCode, listen: str, port: int, interval: str
) -> list[str]:
    """The unit's command: the node's python3 runs the zipapp's ``exporter`` with every other
    node as a probe peer, answering probes on its own addresses."""
    peers = [
        (peer.name, path, address)
        for peer in config.nodes
        if peer.name != node.name
        for path, address in (("fabric", peer.fabric_address), ("mgmt", peer.mgmt_address))
        if address
    ]
    echo = list(dict.fromkeys(a for a in (node.fabric_address, node.mgmt_address) if a))
    args = exporter_args(f"{listen}:{port}", interval, peers=peers, echo=echo)
    return ["/usr/bin/env", "python3", code_path(code), *args]


def code_path(code: NodeCode) -> str:
    return f"{CODE_DIR}/node-{code.digest}.pyz"


def exporter_daemon(node: str, argv: Sequence[str]) -> Daemon:
    """The exporter as a unit of the system's manager: read-only access to sysfs and procfs
    is all it needs."""
    return Daemon(
        UNIT_NAME,
        "halo fabric exporter (RDMA and network counters, peer latency probes)",
        tuple(argv),
        comment=f"written by halo monitoring exporter-unit for {node}",
        service=("DynamicUser=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
                 "NoNewPrivileges=yes", "CapabilityBoundingSet=", "MemoryMax=128M"),
    )  # fmt: skip


def install_unit_script(unit: ExporterUnit, code: NodeCode) -> str:
    """``bash -s`` on the node (as root): the zipapp into /var/lib/halo (checked against its
    hash), then the unit installed as every halo daemon is (``runner.daemon``). Prints
    ``started``, or ``no-systemd`` where systemd does not run."""
    return (
        "set -eu\n"
        f"install -d -m 755 {CODE_DIR}\n"
        f"tmp={CODE_DIR}/.node-$$.part\n"  # in root's own 0755 directory
        "trap 'rm -f \"$tmp\"' EXIT\n"
        f"base64 -d > \"$tmp\" <<'HALO_CODE'\n{code.payload()}\nHALO_CODE\n"
        f'echo "{code.digest}  $tmp" | sha256sum -c --quiet -\n'
        f'chmod 644 "$tmp" && mv "$tmp" {shlex.quote(unit.code_path)}\n'
        "trap - EXIT\n"
        f"{install_script(unit.daemon)}"
        f'if [ "$mode" = {NONE} ]; then echo no-systemd; else echo started; fi\n'
    )


def exporter_units(
    config: Config,
    nodes: Sequence[NodeConfig],
    code: NodeCode,
    listen_on: str,
    port: int,
    interval: str,
) -> list[ExporterUnit]:
    units = []
    for node in nodes:
        argv = exporter_argv(config, node, code, listen_address(node, listen_on), port, interval)
        units.append(ExporterUnit(node.name, exporter_daemon(node.name, argv), code_path(code)))
    return units


def install_units(
    clients: Mapping[str, NodeClient], units: Sequence[ExporterUnit], code: NodeCode
) -> dict[str, JsonObject]:
    """Install every unit, all nodes at once; per node ``{installed, started, error}``. On
    the host, outside the node's exec_prefix: systemd and /var/lib/halo are the machine's,
    not a container's. A node that fails does not stop the others."""

    def install(unit: ExporterUnit) -> JsonObject:
        done = clients[unit.node].host_script(install_unit_script(unit, code), timeout=120)
        last = done.stdout.strip().splitlines()[-1:] if done.ok else []
        return {
            "installed": done.ok,
            "started": done.ok and last == ["started"],
            "error": None if done.ok else done.error_text(),
        }

    return {o.item.node: o.value or _failed(o.error) for o in fan_out(units, install)}


def _failed(error: Exception | None) -> JsonObject:
    """An install that raised (not a failed script: that is a Result) is not installed."""
    return {"installed": False, "started": False, "error": str(error)}
