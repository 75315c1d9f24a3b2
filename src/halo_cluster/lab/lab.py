"""``halo lab``: N nodes on one Linux host. Each node is a network namespace plus its own
PID, mount and UTS namespaces (started with ``unshare``), reachable only by SSH, on two
bridged networks: management (eno1, carries SSH) and fabric (enp194s0np0).

Killing a node's PID-namespace init ends every process of that node, which is how
``down`` and ``kill`` leave nothing behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shlex
import shutil
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from halo_cluster.atomic import atomic_write
from halo_cluster.errors import LabError, UsageError
from halo_cluster.lab.files import write_lab_files
from halo_cluster.lab.mounts import (
    hidden_script,
    keep_paths,
    private_tmp_script,
    read_only_script,
    store_script,
)
from halo_cluster.lab.processes import child_of, in_netns, kill_tree, pid_alive
from halo_cluster.lab.registry import find_leftovers, forget, sweep
from halo_cluster.lab.state import (
    FABRIC_IF,
    MAX_MESH_NODES,
    MAX_NODES,
    MGMT_IF,
    NODE_STORE,
    TOPOLOGIES,
    LabNode,
    LabState,
    cables,
    control_dir,
    neighbour_file,
    new_lab_state,
    read_state,
    registered,
    registered_names,
    write_state,
)
from halo_cluster.lab.subnet import free_subnet, subnet_claim
from halo_cluster.runner.local import LocalRunner
from halo_cluster.runner.result import Runner
from halo_cluster.runner.sharing import close_connections

TOOLS = {
    "ip": "iproute2 (Debian and Fedora)",
    "unshare": "util-linux (Debian and Fedora)",
    "nsenter": "util-linux (Debian and Fedora)",
    "sshd": "openssh-server (Debian and Fedora)",
    "ssh-keygen": "openssh-client (Debian) / openssh (Fedora)",
}
SSHD_WAIT_S = 30.0
# what 'halo lab exec' passes from the caller's environment into a node
EXEC_ENV = ("PATH", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "USER", "LOGNAME", "TZ")


def require_tools() -> dict[str, str]:
    if os.geteuid() != 0:
        raise LabError("halo lab needs root (network namespaces, bridges): run it with sudo")
    return {tool: _tool(tool, package) for tool, package in TOOLS.items()}


def lab_dir(name: str, directory: str | None) -> Path:
    return Path(directory) if directory else Path(".halo-lab") / name


def find_labs(base: Path = Path(".halo-lab")) -> list[str]:
    """Labs in ``base``; when there are none, every lab of this host (the registry)."""
    return sorted(p.parent.name for p in base.glob("*/state.json")) or registered_names()


class Lab:
    def __init__(
        self, runner: Runner | None = None, progress: Callable[[str], None] | None = None
    ) -> None:
        self.runner = runner or LocalRunner()
        self.progress = progress or (lambda _msg: None)

    # -- helpers ------------------------------------------------------------------------
    def sh(self, *argv: str, check: bool = True) -> str:
        result = self.runner.run(list(argv), timeout=30)
        if check and not result.ok:
            raise LabError(f"{shlex.join(argv)} failed: {result.error_text()}")
        return result.stdout

    # -- up -----------------------------------------------------------------------------
    def up(
        self,
        name: str,
        directory: Path,
        nodes: int,
        fabric_mtu: int,
        halo: str | None,
        engine: str | None = None,
        llama_cpp: str | None = None,
        fabric_rate: str | None = None,
        store_size: str | None = None,
        topology: str = "switch",
    ) -> LabState:
        """``halo``: the installed halo the nodes run; None for bare nodes (halo's environment
        hidden from them: only the system Python, and the engine environment as a container
        would offer it). ``fabric_rate``: every node's fabric link limited to it, both ways;
        ``store_size``: every node's model store a tmpfs of that size. ``topology``: one
        fabric switch (a bridge), or cables between the nodes (``mesh``: every pair,
        ``ring``: each node to its two neighbours), left unaddressed for 'halo setup'."""
        tools = require_tools()
        if not 2 <= nodes <= MAX_NODES:
            raise UsageError(f"--nodes must be between 2 and {MAX_NODES}")
        check_topology(topology, nodes)
        if fabric_rate is not None:
            fabric_rate = check_rate(fabric_rate)
            tools["tc"] = _tool("tc", "iproute2 (Debian and Fedora)")
        if store_size is not None:
            store_size = check_size(store_size)
        other = registered(name)
        if read_state(directory) is not None or find_leftovers(name, tools["ip"]):
            where = directory if other is None else Path(other.dir)
            raise LabError(
                f"a lab named {name} already exists in {where}: 'halo lab down --name {name}' first"
            )
        forget(name)  # a stale registry entry of a lab that is gone
        directory.mkdir(parents=True, exist_ok=True)
        if engine is not None:
            engine = os.path.realpath(engine)  # the nodes bind the real directory
            if not os.path.isfile(os.path.join(engine, "bin", "python")):
                raise UsageError(
                    f"--engine {engine}: not an environment (no bin/python); build it with "
                    "'make engine'"
                )
        if llama_cpp is not None:
            llama_cpp = os.path.realpath(llama_cpp)
            if not os.path.isfile(os.path.join(llama_cpp, "bin", "llama-server")):
                raise UsageError(
                    f"--llama-cpp {llama_cpp}: not a llama.cpp build (no bin/llama-server); "
                    "build it with 'make llama-cpp'"
                )
        with contextlib.ExitStack() as claim:
            claim.enter_context(subnet_claim())
            state = new_lab_state(
                name,
                directory.resolve(),
                nodes,
                fabric_mtu,
                free_subnet(self.sh("ip", "-o", "-4", "addr", "show")),
                engine,
                llama_cpp,
                halo,
                fabric_rate,
                store_size,
                topology,
            )
            write_state(state)  # first, so that a failed 'up' can always be taken down
            try:
                self._neighbour_room(len(state.nodes))
                write_lab_files(state, tools["ssh-keygen"])
                self._bridges(state)
                claim.close()  # the subnet's address is on this lab's bridge now
                started = []
                for node in state.nodes:
                    self.progress(f"starting {node.name}")
                    self._links(state, node)
                    self._store(state, node)
                    started.append(self._start(state, node, tools))
                    state = _with_nodes(state, started + list(state.nodes[len(started) :]))
                    write_state(state)
                self._cables(state)
                self._wait_sshd(state)
            except BaseException:
                self.down(state)
                raise
        return state

    def _bridges(self, state: LabState) -> None:
        bridges = [(state.mgmt_bridge, 1500)]
        if not state.routed:
            bridges.append((state.fabric_bridge, state.fabric_mtu))
        for bridge, mtu in bridges:
            self.sh("ip", "link", "add", bridge, "type", "bridge")
            self.sh("ip", "link", "set", bridge, "mtu", str(mtu), "up")
        self.sh("ip", "addr", "add", f"{state.host_address}/24", "dev", state.mgmt_bridge)

    def _neighbour_room(self, nodes: int) -> None:
        """Room in the host's neighbour table for every node's view of every other. The
        kernel keeps one ARP table for all network namespaces, and its default ceiling
        (gc_thresh3, 1024) is below what 32 nodes on two networks hold (~2 n² entries):
        past it, new entries are refused ('neighbor table overflow') and fabric paths
        fail at random. Raised only when too low; the host's own values are kept (once,
        from before the first lab) in ``neighbour_file`` and put back by the last 'down'."""
        need = 2 * nodes * (nodes + 1)  # a mesh's cables hold one neighbour each: fewer
        wanted = {f"net.ipv4.neigh.default.{k}": v for k, v in
                  (("gc_thresh2", 2 * need), ("gc_thresh3", 4 * need))}  # fmt: skip
        current = {name: int(self.sh("sysctl", "-n", name).strip() or 0) for name in wanted}
        low = [name for name in wanted if current[name] < wanted[name]]
        if not low:
            return
        kept = neighbour_file()
        if not kept.exists():  # before the change: a failed 'up' still puts them back
            kept.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(kept, json.dumps(current), prefix=".neigh.")
        for name in low:
            self.sh("sysctl", "-q", "-w", f"{name}={wanted[name]}")

    def _restore_neighbour_room(self, state: LabState) -> None:
        """The host's own thresholds back, once no lab is left."""
        kept = neighbour_file()
        if any(n != state.name for n in registered_names()) or not kept.is_file():
            return
        try:
            values = json.loads(kept.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            values = {}
        for name, value in values.items() if isinstance(values, dict) else ():
            if name.startswith("net.ipv4.neigh.default.gc_thresh") and isinstance(value, int):
                self.sh("sysctl", "-q", "-w", f"{name}={value}", check=False)
        kept.unlink(missing_ok=True)

    def _links(self, state: LabState, node: LabNode) -> None:
        self.sh("ip", "netns", "add", node.netns)
        ns = node.netns
        pairs = [(node.host_mgmt_veth, MGMT_IF, state.mgmt_bridge, node.mgmt_address, 1500)]
        if not state.routed:
            pairs.append(
                (
                    node.host_fabric_veth,
                    FABRIC_IF,
                    state.fabric_bridge,
                    node.fabric_address,
                    state.fabric_mtu,
                )
            )
        for host_end, inner, bridge, address, mtu in pairs:
            self.sh(
                "ip",
                "link",
                "add",
                host_end,
                "mtu",
                str(mtu),
                "type",
                "veth",
                "peer",
                "name",
                inner,
                "mtu",
                str(mtu),
                "netns",
                ns,
            )
            self.sh("ip", "link", "set", host_end, "master", bridge, "up")
            self.sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", inner)
            self.sh("ip", "-n", ns, "link", "set", inner, "up")
        self.sh("ip", "-n", ns, "link", "set", "lo", "up")
        if not state.routed:  # a mesh's or ring's cables are limited once they exist
            self._rate(state, node)

    def _cables(self, state: LabState) -> None:
        """A mesh's or ring's cables: a veth pair from one node's namespace straight into
        the other's, each end named as USB4 networking names its ports, both ends at the
        fabric MTU, up, without addresses (those are 'halo setup''s)."""
        for (node, ifname), (peer, peer_ifname) in cables(state):
            self.sh(
                "ip", "link", "add", ifname, "netns", node.netns, "mtu", str(state.fabric_mtu),
                "type", "veth", "peer", "name", peer_ifname, "netns", peer.netns,
                "mtu", str(state.fabric_mtu),
            )  # fmt: skip
            for ns, name in ((node.netns, ifname), (peer.netns, peer_ifname)):
                self.sh("ip", "-n", ns, "link", "set", name, "up")
        for node in state.nodes:
            self._rate(state, node)

    def _store(self, state: LabState, node: LabNode) -> None:
        """The host directory behind the node's model store; a tmpfs of ``store_size``
        mounted on it when the lab has one (a disk that can fill)."""
        path = Path(state.store(node))
        path.mkdir(parents=True, exist_ok=True, mode=0o755)
        if state.store_size and not _mounted(str(path)):
            self.sh(
                "mount",
                "-t",
                "tmpfs",
                "-o",
                f"size={state.store_size},mode=755",
                "tmpfs",
                str(path),
            )

    def _rate(self, state: LabState, node: LabNode) -> None:
        """tbf on both ends of the node's fabric link: what the node sends (its interface)
        and what it receives (the host's end, whose egress goes into the node)."""
        if not state.fabric_rate:
            return
        for prefix, device in _rate_ends(node):
            self.sh(
                *prefix,
                "tc",
                "qdisc",
                "replace",
                "dev",
                device,
                "root",
                *tbf_args(state.fabric_rate, state.fabric_mtu),
            )

    def set_rate(self, state: LabState, rate: str | None) -> LabState:
        """Limit every node's fabric link to ``rate`` both ways from now on (None: no limit),
        on a running lab: servers and connections stay up. The state keeps the rate, so a
        node that boots again gets it too."""
        _tool("tc", "iproute2 (Debian and Fedora)")
        rate = check_rate(rate, "RATE") if rate is not None else None
        for node in state.nodes:
            if rate is None:
                for prefix, device in _rate_ends(node):
                    # a link without a limit has no root qdisc of ours: nothing to remove
                    self.sh(*prefix, "tc", "qdisc", "del", "dev", device, "root", check=False)
        state = dataclasses.replace(state, fabric_rate=rate)
        for node in state.nodes:
            self._rate(state, node)
        write_state(state)
        return state

    def _start(self, state: LabState, node: LabNode, tools: dict[str, str]) -> LabNode:
        """The node's init: its own PID, mount and UTS namespaces inside its network
        namespace; private /tmp, /run and /dev/shm (hosts share none of them: an engine that
        sees one /dev/shm believes its ranks share a host); its own /etc/hosts with the
        cluster's names on the fabric (``write_lab_files``); the engine environment mounted
        read-only, as a container image would be; sshd; then it only reaps orphans."""
        sshd_config = Path(state.dir) / f"sshd_config.{node.name}"
        hosts = shlex.quote(str(Path(state.dir) / f"hosts.{node.name}"))  # a lab made before: none
        script = (
            "set -e\n"
            f"hostname {shlex.quote(node.name)}\n"
            "mount -t tmpfs -o mode=755 tmpfs /run\n"
            "mkdir -p /run/sshd\n"
            f"mkdir -p -m 700 {shlex.quote(str(control_dir(state.name)))}\n"
            "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm\n"
            f"if [ -f {hosts} ]; then mount --bind {hosts} /etc/hosts; fi\n"
            # what halo installs on a host (the exporter's unit and code) stays in the node
            "mkdir -p /var/lib/halo /etc/systemd/system\n"
            "mount -t tmpfs -o mode=755 tmpfs /var/lib/halo\n"
            "mount -t tmpfs -o mode=755 tmpfs /etc/systemd/system\n"
            "ulimit -l unlimited 2>/dev/null || true\n"  # as on an RDMA host, where allowed
            f"{private_tmp_script(keep_paths(state))}"
            f"{store_script(state.store(node), NODE_STORE)}"
            f"{read_only_script(state.engine)}"
            f"{read_only_script(state.llama_cpp)}"
            f"{hidden_script(None if state.halo else sys.prefix)}"
            f"{shlex.quote(tools['sshd'])} -f {shlex.quote(str(sshd_config))}\n"
            "trap 'exit 0' TERM\n"
            "while :; do sleep 3600 & wait $! || true; done\n"
        )
        argv = [
            tools["ip"],
            "netns",
            "exec",
            node.netns,
            tools["unshare"],
            "--pid",
            "--fork",
            "--mount",
            "--uts",
            "--mount-proc",
            "--propagation",
            "private",
            "bash",
            "-c",
            script,
        ]
        proc = LocalRunner().start(argv, new_session=True)
        return _replace_pid(node, child_of(proc.pid))

    def _wait_sshd(self, state: LabState) -> None:
        deadline = time.monotonic() + SSHD_WAIT_S
        for node in state.nodes:
            while not sshd_answers(node.mgmt_address):
                if time.monotonic() > deadline:
                    raise LabError(
                        f"sshd on {node.name} ({node.mgmt_address}) did not start within "
                        f"{SSHD_WAIT_S:g} s"
                    )
                time.sleep(0.02)

    # -- down ---------------------------------------------------------------------------
    def down(self, state: LabState) -> None:
        """Remove everything the state names (what is already gone is skipped), then
        whatever else is named after the lab."""
        self._close_ssh_masters(state)
        for node in state.nodes:
            kill_tree(in_netns(node.init_pid, node.netns))
        for node in state.nodes:
            self.sh("ip", "netns", "del", node.netns, check=False)
            for veth in (node.host_mgmt_veth, node.host_fabric_veth):
                self.sh("ip", "link", "del", veth, check=False)
        for bridge in (state.mgmt_bridge, state.fabric_bridge):
            self.sh("ip", "link", "del", bridge, check=False)
        for node in state.nodes:  # a store's tmpfs, before its directory goes
            if _mounted(state.store(node)):
                self.sh("umount", "-l", state.store(node), check=False)
        self._restore_neighbour_room(state)
        shutil.rmtree(state.dir, ignore_errors=True)
        sweep(state.name)

    def _close_ssh_masters(self, state: LabState) -> None:
        """End the shared SSH connections to the nodes: the lab's own (its ssh_config's
        ControlPersist) and halo's (when that ssh_config was made not to share)."""
        config = Path(state.dir) / "ssh_config"
        if not config.exists():
            return
        aliases = [a for n in state.nodes for a in (n.name, f"{n.name}-fabric")]
        for alias in aliases:
            self.sh("ssh", "-F", str(config), "-O", "exit", "--", alias, check=False)
        close_connections(aliases, config, self.runner)

    # -- faults -------------------------------------------------------------------------
    def set_link(self, node: LabNode, net: str, up: bool, link: str | None = None) -> list[str]:
        """Take a link of ``node`` down or up: its management or fabric interface, on a mesh
        or ring every cable of the node, or only the cable on ``link``. The interfaces."""
        if link is not None:
            if link not in {ifname for ifname, _ in node.links}:
                have = ", ".join(ifname for ifname, _ in node.links) or "none (a switch lab)"
                raise UsageError(f"{node.name} has no cable on {link!r} (its cables: {have})")
            inner = [link]
        elif net == "fabric" and node.links:
            inner = [ifname for ifname, _ in node.links]
        else:
            inner = [FABRIC_IF if net == "fabric" else MGMT_IF]
        for name in inner:
            self.sh("ip", "-n", node.netns, "link", "set", name, "up" if up else "down")
        return inner

    def kill(self, state: LabState, node: LabNode) -> LabState:
        kill_tree(in_netns(node.init_pid, node.netns))
        nodes = [_replace_pid(n, None) if n.name == node.name else n for n in state.nodes]
        new = _with_nodes(state, nodes)
        write_state(new)
        return new

    def restart(self, state: LabState, node: LabNode) -> LabState:
        """Boot a killed node again: a new init (and sshd) in the same network namespace."""
        if node.init_pid is not None and pid_alive(node.init_pid):
            return state
        fresh = self._start(state, node, require_tools())
        nodes = [fresh if n.name == node.name else n for n in state.nodes]
        new = _with_nodes(state, nodes)
        write_state(new)
        self._wait_sshd(_with_nodes(new, [fresh]))
        return new

    def exec_argv(
        self, node: LabNode, command: Sequence[str], home: str | None = None
    ) -> list[str]:
        """Run ``command`` inside ``node`` with the environment a login there would have,
        not the caller's: only ``EXEC_ENV`` passes (an inherited TMPDIR or XDG directory
        would make two nodes share state), and HOME is the node's own."""
        if node.init_pid is None or not pid_alive(node.init_pid):
            raise LabError(f"{node.name} is not running (killed?): 'halo lab down' and 'up' again")
        nsenter = shutil.which("nsenter") or "nsenter"
        env = [f"{k}={v}" for k, v in os.environ.items() if k in EXEC_ENV]
        env += [f"HOME={home or '/root'}", f"HOSTNAME={node.name}"]
        return [
            nsenter,
            "--target",
            str(node.init_pid),
            "--net",
            "--pid",
            "--mount",
            "--uts",
            "--",
            "env",
            "-i",
            *env,
            *command,
        ]


_RATE = re.compile(r"^(\d{1,6})(\.\d{1,3})?(k|m|g)bit$")
_SIZE = re.compile(r"^\d{1,9}[kmg]?$", re.I)


def _rate_bits(text: str) -> float | None:
    """bits/s of a rate as tc writes it (``1gbit``, ``2.5gbit``), None when it is not one."""
    found = _RATE.match(text)
    if found is None:
        return None
    return (
        float(found.group(1) + (found.group(2) or ""))
        * {"k": 1e3, "m": 1e6, "g": 1e9}[found.group(3)]
    )


def check_rate(text: str, what: str = "--fabric-rate") -> str:
    """A rate as tc writes it: ``1gbit``, ``2.5gbit``, ``100mbit`` (at least 1 Mbit/s)."""
    rate = text.strip().lower()
    bits = _rate_bits(rate)
    if bits is None or bits < 1e6:
        raise UsageError(f"{what} {text!r}: use a rate such as 1gbit, 2.5gbit or 100mbit")
    return rate


def check_size(text: str) -> str:
    if not _SIZE.match(text.strip()):
        raise UsageError(f"--store-size {text!r}: use a size such as 64m or 2g")
    return text.strip().lower()


def tbf_args(rate: str, mtu: int) -> list[str]:
    """A token bucket at ``rate``: a burst of 10 ms of the rate (at least a few jumbo
    frames), packets queued at most 100 ms."""
    bits = _rate_bits(rate)
    assert bits is not None
    burst = max(int(bits / 8 / 100), 4 * (mtu + 100), 16384)
    return ["tbf", "rate", rate, "burst", str(burst), "latency", "100ms"]


def _mounted(path: str) -> bool:
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mounts", encoding="utf-8") as handle:
            return any(line.split()[1] == real for line in handle if len(line.split()) > 1)
    except OSError:
        return False


def _tool(tool: str, package: str) -> str:
    path = shutil.which(tool) or (
        f"/usr/sbin/{tool}" if os.path.exists(f"/usr/sbin/{tool}") else None
    )
    if path is None:
        raise LabError(f"'{tool}' not found: install {package}")
    return path


def _with_nodes(state: LabState, nodes: Sequence[LabNode]) -> LabState:
    return dataclasses.replace(state, nodes=tuple(nodes))


def _replace_pid(node: LabNode, pid: int | None) -> LabNode:
    return dataclasses.replace(node, init_pid=pid)


def _rate_ends(node: LabNode) -> list[tuple[tuple[str, ...], str]]:
    """Where the node's fabric is limited, both ways: on a switch its interface (what it
    sends) and the host's end (what it receives); on cables each of its ends (the other end
    of each cable limits the other way)."""
    inside = ("ip", "netns", "exec", node.netns)
    if node.links:
        return [(inside, ifname) for ifname, _ in node.links]
    return [(inside, FABRIC_IF), ((), node.host_fabric_veth)]


def check_topology(topology: str, nodes: int) -> None:
    if topology not in TOPOLOGIES:
        raise UsageError(f"--topology {topology!r}: use one of {', '.join(TOPOLOGIES)}")
    if topology == "ring" and nodes < 3:
        raise UsageError("a ring needs at least 3 nodes (2 nodes: --topology mesh, one cable)")
    if topology == "mesh" and nodes > MAX_MESH_NODES:
        raise UsageError(
            f"a mesh of {nodes} nodes needs {nodes * (nodes - 1) // 2} cables: at most "
            f"{MAX_MESH_NODES} nodes (use --topology ring or switch for more)"
        )


def sshd_answers(address: str, port: int = 22, timeout_s: float = 0.3) -> bool:
    with socket.socket() as sock:
        sock.settimeout(timeout_s)
        return sock.connect_ex((address, port)) == 0
