"""The files a lab writes into its directory: keys, sshd configs, ssh_config, known_hosts
and a halo.toml that every other command can use."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from halo_cluster.lab.state import LabState


def write_lab_files(state: LabState, halo: str, ssh_keygen: str) -> None:
    d = Path(state.dir)
    for key in ("id_ed25519", "host_ed25519"):
        if not (d / key).exists():
            subprocess.run(
                [
                    ssh_keygen,
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    f"halo-lab-{state.name}",
                    "-f",
                    str(d / key),
                ],
                check=True,
                stdin=subprocess.DEVNULL,
            )
    os.chmod(d / "id_ed25519", 0o600)
    (d / "authorized_keys").write_text((d / "id_ed25519.pub").read_text())
    host_pub = (d / "host_ed25519.pub").read_text().split()
    known = []
    for node in state.nodes:
        (d / f"sshd_config.{node.name}").write_text(
            _sshd_config(d, node.mgmt_address, node.fabric_address)
        )
        names = f"{node.name},{node.name}-fabric,{node.mgmt_address},{node.fabric_address}"
        known.append(f"{names} {host_pub[0]} {host_pub[1]}\n")
    (d / "known_hosts").write_text("".join(known))
    (d / "ssh_config").write_text(_ssh_config(d, state))
    (d / "halo.toml").write_text(_halo_toml(state, halo))


def _sshd_config(d: Path, *addresses: str) -> str:
    listen = "".join(f"ListenAddress {a}\n" for a in addresses)
    return (
        f"# halo lab node sshd: root by key only\n{listen}Port 22\n"
        f"HostKey {d / 'host_ed25519'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "UsePAM no\nStrictModes no\nPidFile /run/sshd.pid\nAcceptEnv none\nLogLevel ERROR\n"
    )


def _ssh_config(d: Path, state: LabState) -> str:
    common = (
        f"  User root\n  IdentityFile {d / 'id_ed25519'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {d / 'known_hosts'}\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n"
        # one SSH connection per node, reused by every command (halo runs many short ones);
        # 'halo lab down' closes them
        "  ControlMaster auto\n  ControlPath /tmp/halo-cm-%C\n  ControlPersist 60\n"
        # a dead node (lab kill, lab cut) must fail the shared connection within seconds
        "  ServerAliveInterval 1\n  ServerAliveCountMax 3\n"
    )
    blocks = []
    for node in state.nodes:
        blocks.append(f"Host {node.name}\n  HostName {node.mgmt_address}\n{common}")
        blocks.append(f"Host {node.name}-fabric\n  HostName {node.fabric_address}\n{common}")
    return "".join(blocks)


def _halo_toml(state: LabState, halo: str) -> str:
    nodes = "".join(
        f'\n[[node]]\nname = "{n.name}"\nssh = "{n.name}"\nfabric_address = "{n.fabric_address}"\n'
        f'mgmt_address = "{n.mgmt_address}"\n'
        f'halo = "{halo}"\ngpus = 0\n'
        for n in state.nodes
    )
    return (
        f'# written by halo lab up: lab nodes are CPU-only\n[cluster]\nname = "lab-{state.name}"\n'
        f'transport = "ethernet"\nssh_config = "ssh_config"\n{nodes}'
    )
