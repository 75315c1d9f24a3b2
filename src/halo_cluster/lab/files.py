"""The files a lab writes into its directory: keys, sshd configs, ssh_config, known_hosts
and a halo.toml that every other command can use."""

from __future__ import annotations

import os
from pathlib import Path

from halo_cluster.errors import LabError
from halo_cluster.hostsfile import with_names
from halo_cluster.lab.state import NODE_STORE, LabState, control_dir
from halo_cluster.runner.local import LocalRunner


def write_lab_files(state: LabState, ssh_keygen: str) -> None:
    d = Path(state.dir)
    for key in ("id_ed25519", "host_ed25519"):
        if not (d / key).exists():
            made = LocalRunner().run(
                [ssh_keygen, "-q", "-t", "ed25519", "-N", "", "-C", f"halo-lab-{state.name}",
                 "-f", str(d / key)],
                stdin="",
            )  # fmt: skip
            if not made.ok:
                raise LabError(f"ssh-keygen could not write {d / key}: {made.error_text()}")
    os.chmod(d / "id_ed25519", 0o600)
    (d / "authorized_keys").write_text((d / "id_ed25519.pub").read_text())
    host_pub = (d / "host_ed25519.pub").read_text().split()
    known = []
    for node in state.nodes:
        Path(state.home(node)).mkdir(parents=True, exist_ok=True)
        # on cables the identity address is there only once 'halo setup' has put it there
        listen = (node.mgmt_address,) if state.routed else (node.mgmt_address, node.fabric_address)
        (d / f"sshd_config.{node.name}").write_text(_sshd_config(d, state.home(node), *listen))
        names = f"{node.name},{node.name}-fabric,{node.mgmt_address},{node.fabric_address}"
        known.append(f"{names} {host_pub[0]} {host_pub[1]}\n")
    (d / "known_hosts").write_text("".join(known))
    # each node's /etc/hosts (bound over its own): the host's, with the cluster's names on
    # the fabric as 'halo setup' writes them on a real node
    try:
        base = Path("/etc/hosts").read_text(encoding="utf-8", errors="replace")
    except OSError:
        base = "127.0.0.1\tlocalhost\n"
    fabric = {n.name: n.fabric_address for n in state.nodes}
    try:
        text = with_names(base, fabric)
    except ValueError:  # the host's own file holds a cut block: the nodes' start clean
        text = with_names("127.0.0.1\tlocalhost\n", fabric)
    for node in state.nodes:
        (d / f"hosts.{node.name}").write_text(text)
    (d / "ssh_config").write_text(_ssh_config(d, state))
    (d / "halo.toml").write_text(_halo_toml(state))


def _sshd_config(d: Path, home: str, *addresses: str) -> str:
    listen = "".join(f"ListenAddress {a}\n" for a in addresses)
    return (
        f"# halo lab node sshd: root by key only\n{listen}Port 22\n"
        # each node its own HOME: logs, pid files and caches of two nodes never collide
        f"SetEnv HOME={home}\n"
        # the lab's key, and the node's own ~/.ssh/authorized_keys (where halo serve's
        # supervisor on the head has its key authorized, as on a real node)
        f"HostKey {d / 'host_ed25519'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'} {home}/.ssh/authorized_keys\n"
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
        # (sockets in the lab's 0700 directory under /run; each node has its own there)
        f"  ControlMaster auto\n  ControlPath {control_dir(state.name)}/%C\n  ControlPersist 60\n"
        # a dead node (lab kill, lab cut) must fail the shared connection within seconds
        "  ServerAliveInterval 1\n  ServerAliveCountMax 3\n"
    )
    blocks = []
    for node in state.nodes:
        blocks.append(f"Host {node.name}\n  HostName {node.mgmt_address}\n{common}")
        blocks.append(f"Host {node.name}-fabric\n  HostName {node.fabric_address}\n{common}")
    return "".join(blocks)


def _halo_toml(state: LabState) -> str:
    engine = ""
    if state.engine or state.llama_cpp:
        engine = "\n[serve]\n"
    if state.engine:
        bin_dir = Path(state.engine) / "bin"
        engine = (
            "\n# the engine environment (vLLM CPU, Ray, halo's adapter), read-only on every node\n"
            f'[ray]\ncommand = "{bin_dir / "ray"}"\n{engine}'
            # a small model on a small machine: short context, few sequences
            "max_model_len = 1024\nmax_num_seqs = 8\n\n"
            # no graph compilation (ready in about half the time)
            f'[serve.vllm]\ncommand = "{bin_dir / "vllm"}"\nenforce_eager = true\n'
        )
    if state.llama_cpp:
        engine += (
            "\n# llama.cpp (halo serve --engine llama.cpp): ggml-rpc-server and llama-server,\n"
            + "# read-only on every node; one thread each (the nodes share this machine's cores)\n"
            + f'[serve.llama_cpp]\nbuild = "{state.llama_cpp}"\nthreads = 1\n'
        )
    nodes = "".join(
        f'\n[[node]]\nname = "{n.name}"\nssh = "{n.name}"\nfabric_address = "{n.fabric_address}"\n'
        f'mgmt_address = "{n.mgmt_address}"\n'
        f"{_node_code(state)}gpus = 0\n{_engine_env(state, i)}{_links(n.links)}"
        for i, n in enumerate(state.nodes)
    )
    return (
        f'# written by halo lab up: lab nodes are CPU-only\n[cluster]\nname = "lab-{state.name}"\n'
        f'transport = "ethernet"\nssh_config = "ssh_config"\n'
        "# the planner's view (halo run, halo tune): this machine and its loopback fabric, as\n"
        "# 'halo lab profile' measures them\n"
        'hardware = "lab"\nlink = "lab"\n'
        "\n# each node's own model store (halo model sync); only that node sees it\n"
        f'[models]\ndir = "{NODE_STORE}"\n{_fabric(state)}{engine}{nodes}'
    )


def _fabric(state: LabState) -> str:
    """A mesh's or ring's [fabric]: where the cables' /31s come from, and their MTU."""
    if not state.routed:
        return ""
    return (
        f"\n# the lab's cables ({state.topology}): 'halo setup --apply' addresses and routes them\n"
        f'[fabric]\nlink_network = "{state.link_network}"\nmtu = {state.fabric_mtu}\n'
    )


def _links(links: tuple[tuple[str, str], ...]) -> str:
    if not links:
        return ""
    return "links = { " + ", ".join(f'{ifname} = "{peer}"' for ifname, peer in links) + " }\n"


def _node_code(state: LabState) -> str:
    """How a node runs halo's node-side commands: the installed halo, or (bare) halo's node
    code sent to its Python; with the engine environment offered as a container would, by
    an ``exec_prefix`` that puts it first on PATH (its python3, ray and vllm)."""
    if state.halo:
        return f'halo = "{state.halo}"\n'
    if not state.engine:
        return ""  # the system's python3
    path = (
        f"{Path(state.engine) / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    )
    return f'exec_prefix = ["env", "PATH={path}"]\n'


def _engine_env(state: LabState, index: int) -> str:
    """The engine's environment on lab node ``index``: no hub (nothing is downloaded),
    a 1 GiB KV cache, and one core of this machine per node for the engine's threads
    (the nodes share the machine's cores; vLLM's own executor binds its ranks there)."""
    if not state.engine:
        return ""
    core = index % (os.cpu_count() or 1)
    values = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": str(core),
    }
    return "env = { " + ", ".join(f'{k} = "{v}"' for k, v in values.items()) + " }\n"
