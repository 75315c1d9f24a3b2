"""Gather every node's inventory (and fabric reachability) in parallel, one client per node."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from halo_cluster.bounded.jsonin import loads
from halo_cluster.checks.context import NodeReport
from halo_cluster.checks.memory_owners import HostMemory, parse_owners
from halo_cluster.client.fanout import each
from halo_cluster.client.node import NodeClient, escaped, first_bytes
from halo_cluster.config import Config, NodeConfig
from halo_cluster.engines import scripts
from halo_cluster.errors import ParseError
from halo_cluster.facts.host import LIB_DIRS, LIBIBVERBS
from halo_cluster.facts.links import FabricView, parse_fabric_view, parse_route_get
from halo_cluster.facts.model import HostHca, inventory_from_dict
from halo_cluster.mesh import Fabric, NodeFabric
from halo_cluster.netnames import node_address_problem
from halo_cluster.nodecode import problem
from halo_cluster.supervision import count, key_values
from halo_cluster.wire.args import inventory_args

INVENTORY_TIMEOUT_S = 30.0
PING_TIMEOUT_S = 5.0
# the fallback's ping processes a host runs at once (a process per peer, n - 1 of them)
PING_WAVE = 8


def gather(
    config: Config,
    clients: Mapping[str, NodeClient],
    nodes: list[NodeConfig] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[NodeReport]:
    """Every chosen node's report, in the order of ``nodes`` (default: the config's)."""
    chosen = nodes if nodes is not None else list(config.nodes)
    mesh = config.mesh()  # planned once for every node's host script
    return each(chosen, lambda node: _done(progress, _report(config, clients[node.name], mesh)))


def _report(config: Config, client: NodeClient, mesh: Fabric | None) -> NodeReport:
    """The node's inventory (its node code, inside its exec_prefix) and, at the same time,
    its host's view of the fabric (pings to every peer, ``ethtool -i``: one host script;
    on a routed fabric, jumbo pings to every identity, a ping over every cable and the
    state of each: ``facts/links.py``)."""
    node = client.node
    peers = {p.name: p.fabric_address for p in config.nodes if p.name != node.name}
    targets = {name: address for name, address in peers.items() if address}
    fabric = mesh.node(node.name) if mesh is not None else None
    with ThreadPoolExecutor(1, thread_name_prefix="halo-host") as pool:
        host = pool.submit(
            host_view, client, targets, node.fabric_address, fabric, bool(node.exec_prefix)
        )
        result = client.call(*inventory_args(versions=True), timeout=INVENTORY_TIMEOUT_S)
        view = host.result()
    if not result.ok:
        found = problem(result.returncode, result.stderr) if node.halo is None else None
        if found is not None and found.kind != "code":  # reached, but cannot run halo there
            return NodeReport(node, None, found.detail, python=found)
        return NodeReport(node, None, f"{node.ssh}: {result.error_text()}")
    try:
        inv = inventory_from_dict(loads(result.stdout))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        # one line, whatever the node sent: the reason and the first bytes, escaped
        reason, shown = escaped(str(err), 120), first_bytes(result.stdout)
        message = f"{node.ssh}: unreadable inventory from {node.runs} ({reason}; got {shown})"
        return NodeReport(node, None, message)
    return NodeReport(
        node,
        inv,
        None,
        view.pings,
        view.ethtool,
        code_sent=client.sent,
        links=view.links,
        link_pings=view.link_pings,
        names=view.names,
        host_hca=view.hca,
        host_memory=view.memory,
    )


@dataclass(frozen=True)
class HostView:
    """What one host script saw: which peers answered a ping (by node name), ``ethtool -i``
    of the fabric interface, and on a routed fabric the cables' state and which cables'
    far ends answered (by interface)."""

    pings: dict[str, bool]
    ethtool: dict[str, str] | None = None
    links: FabricView | None = None
    link_pings: dict[str, bool] = field(default_factory=dict)
    names: dict[str, str | None] = field(default_factory=dict)  # peer -> what it resolves to
    hca: HostHca | None = None  # the host's RDMA, where commands run in a container
    memory: HostMemory | None = None  # the host's memory and who holds the most of it


def host_view(
    client: NodeClient,
    targets: Mapping[str, str],
    fabric_address: str | None,
    fabric: NodeFabric | None = None,
    container: bool = False,
) -> HostView:
    """On the node's host (the fabric is the machine's, not the container's), in one call:
    whether each target answers a ping, and ``ethtool -i`` of the interface that holds
    ``fabric_address`` (None when there is none, or no ethtool). On a routed fabric
    (``fabric``) the targets (identities) are pinged with frames of the cables' MTU that
    may not be fragmented, the far end of every cable is pinged too, and the cables'
    state is read. ``container``: the node's commands run in one (an exec_prefix): the
    host's own RDMA devices and rdma-core are read too, to set against the container's."""
    names = list(targets)
    addresses = [targets[n] for n in names]
    if fabric is not None:
        mtu = fabric.mtu
        addresses = [f"{a}@{mtu}" if mtu else a for a in addresses]
        addresses += [link.peer_address for link in fabric.links]
    waves = -(-len(addresses) // PING_WAVE)  # each wave ends within ping's own 2 s
    script = ping_script(addresses) + names_script(names) if addresses else ""
    if container:
        script += HCA_SCRIPT
    script += MEMORY_SCRIPT
    if fabric is not None:
        script += fabric_script(fabric, {n: targets[n] for n in names})
    if fabric_address:
        script += ethtool_script(fabric_address)
    bound = PING_TIMEOUT_S + 2 * waves + (NAMES_S if names and addresses else 0)
    done = client.host_script(script, timeout=bound)
    links = fabric.links if fabric is not None else ()
    if not done.ok:
        silent = {link.ifname: False for link in links}
        return HostView(dict.fromkeys(names, False), None, None, silent)
    head, _, ethtool_text = done.stdout.partition(ETHTOOL_MARK)
    head, _, fabric_text = head.partition(FABRIC_MARK)
    head, memory_mark, memory_text = head.partition(MEMORY_MARK)
    head, hca_mark, hca_text = head.partition(HCA_MARK)
    pings_text, _, names_text = head.partition(NAMES_MARK)
    answered = parse_pings(pings_text, len(addresses))
    iface, _, output = ethtool_text.partition("\n")
    view = None
    if fabric is not None:
        state_text, _, routes_text = fabric_text.partition(ROUTES_MARK)
        try:
            view = parse_fabric_view(state_text)
        except ParseError:
            view = None  # the checks say the cables' state is unknown
        else:
            devs = parse_route_get(routes_text)
            view = replace(view, routes={n: devs.get(targets[n]) for n in names})
    return HostView(
        {name: index in answered for index, name in enumerate(names)},
        {iface.strip(): output} if iface.strip() else None,
        view,
        {link.ifname: len(names) + k in answered for k, link in enumerate(links)},
        parse_names(names_text, names),
        parse_host_hca(hca_text) if hca_mark else None,
        parse_host_memory(memory_text) if memory_mark else None,
    )


FABRIC_MARK = "--- fabric\n"
NAMES_MARK = "--- names\n"
NAMES_S = 4  # the names section's bound: its lookups run at once, 3 s each at most
HCA_MARK = "--- hca\n"
MEMORY_MARK = "--- memory\n"
# the host's MemTotal/MemAvailable and the processes holding the most of its memory
MEMORY_SCRIPT = f"echo '{MEMORY_MARK.strip()}'\n{scripts.MEMINFO}{scripts.OWNERS}"


def parse_host_memory(text: str) -> HostMemory:
    """``MEMORY_SCRIPT``'s lines: the total (None: unread) and every owner named."""
    said = key_values(text)
    return HostMemory(count(said.get("mem_total_kib")), tuple(parse_owners(text)))


# the host's RDMA devices, uverbs nodes and libibverbs (outside the node's container)
HCA_SCRIPT = (
    f"echo '{HCA_MARK.strip()}'\n"
    'for d in /sys/class/infiniband/*; do if [ -e "$d" ]; then echo "device ${d##*/}"; fi; done\n'
    'for u in /dev/infiniband/uverbs*; do if [ -e "$u" ]; then echo "uverbs ${u##*/}"; fi; done\n'
    f"for l in {' '.join('/' + d for d in LIB_DIRS)}; do\n"
    '  for f in "$l"/libibverbs.so.1.*; do if [ -e "$f" ]; then echo "library ${f##*/}"; fi; done\n'
    "done\n"
)


def parse_host_hca(text: str) -> HostHca:
    """``HCA_SCRIPT``'s lines as the host's RDMA (the first libibverbs found names the
    rdma-core release, as the node's own facts read it); other lines are passed over."""
    devices, uverbs, release = [], [], None
    for line in text.splitlines():
        kind, _, name = line.partition(" ")
        if kind == "device" and name:
            devices.append(name)
        elif kind == "uverbs" and name:
            uverbs.append(name)
        elif kind == "library" and release is None:
            found = LIBIBVERBS.match(name)
            release = int(found.group(1)) if found else None
    return HostHca(tuple(devices), tuple(uverbs), release)


def names_script(names: Sequence[str]) -> str:
    """Shell lines: what each peer's name resolves to here, as ``NAME=ADDRESS`` lines (the
    first IPv4 address the resolver gives, as an engine's bootstrap would get it; empty
    where it resolves to none). The lookups run at once, each bounded (a dead DNS server
    takes seconds): the whole section ends within ``NAMES_S``."""
    quoted = " ".join(shlex.quote(name) for name in names)
    return (
        f"echo '{NAMES_MARK.strip()}'\n"
        f"for n in {quoted}; do\n"
        f'  ( a="$(timeout {NAMES_S - 1} getent ahostsv4 "$n" 2>/dev/null | head -n 1 | '
        'cut -d " " -f 1)"; echo "$n=$a" ) &\n'
        "done\nwait\n"
    )


def parse_names(text: str, names: Sequence[str]) -> dict[str, str | None]:
    """Each asked name's address from ``names_script``'s lines (None: unresolved, or not
    an IPv4 address; a name the output does not list is None)."""
    found: dict[str, str | None] = dict.fromkeys(names)
    for line in text.splitlines():
        name, sep, address = line.partition("=")
        if sep and name in found:
            found[name] = address if address and node_address_problem(address) is None else None
    return found


ROUTES_MARK = "--- routes\n"


def fabric_script(fabric: NodeFabric, identities: Mapping[str, str]) -> str:
    """Script lines: ``FABRIC_MARK``, then the lines ``facts/links.py`` reads: every cable's
    carrier, MTU and error counters, forwarding and the interface holding the identity;
    then ``ROUTES_MARK`` and the kernel's route to each peer's identity (``ip route get``,
    all in one process). Names and addresses are quoted: nothing in them is run."""
    lines = [f"printf -- {shlex.quote(FABRIC_MARK)}\n"]
    for link in fabric.links:
        d = shlex.quote(f"/sys/class/net/{link.ifname}")
        name = shlex.quote(link.ifname)
        lines.append(
            f"if [ -e {d} ]; then echo link {name} $(cat {d}/carrier 2>/dev/null || echo -) "
            f"$(cat {d}/mtu 2>/dev/null || echo -) "
            f"$(cat {d}/statistics/rx_errors 2>/dev/null || echo -) "
            f"$(cat {d}/statistics/tx_errors 2>/dev/null || echo -); "
            f"else echo link {name} missing; fi\n"
        )
    lines.append('echo forward "$(cat /proc/sys/net/ipv4/ip_forward 2>/dev/null || echo -)"\n')
    lines.append(
        f"set -- $(ip -o -4 addr show to {shlex.quote(fabric.identity)} 2>/dev/null)\n"
        'echo identity "${2:--}"\n'
    )
    if identities:
        # every peer's route in one ip process (one line per lookup, the address first)
        lookups = "".join(f"route get {address}\n" for address in identities.values())
        lines.append(
            f"printf -- {shlex.quote(ROUTES_MARK)}\n"
            f"printf %s {shlex.quote(lookups)} | ip -force -o -batch - 2>/dev/null\n"
        )
    return "".join(lines)


ETHTOOL_MARK = "--- ethtool "


def ethtool_script(address: str) -> str:
    """Script lines: ``ETHTOOL_MARK IFACE`` and ``ethtool -i IFACE``'s output, for the
    interface holding ``address``; nothing when none does or ethtool fails."""
    return (
        f"set -- $(ip -o -4 addr show to {shlex.quote(address)} 2>/dev/null)\n"
        'if [ -n "$2" ] && out=$(ethtool -i "$2" 2>/dev/null); then\n'
        f'  printf -- "{ETHTOOL_MARK}%s\\n%s\\n" "$2" "$out"\n'
        "fi\n"
    )


def ping_script(addresses: Sequence[str], wave: int = PING_WAVE) -> str:
    """A ``bash -s`` script that pings every address once (a second echo after 1 s for one
    that has not answered; 2 s in all) and prints ``INDEX RC`` for each: one Python process
    with one ICMP socket for all of them (``PINGER``), else — no python3, or no ICMP socket
    allowed — one ``ping -c 1 -W 2`` per address, ``wave`` at once. ``ADDRESS@SIZE``: an
    echo of SIZE bytes (IP header included) that may not be fragmented (a path that cannot
    carry frames of its MTU fails). Addresses are quoted: nothing in them is run."""
    quoted = " ".join(shlex.quote(a) for a in addresses)
    lines = [f"if ! python3 -I -S -c {shlex.quote(PINGER)} {quoted} 2>/dev/null; then\n"]
    for index, target in enumerate(addresses):
        address, _, size = target.partition("@")
        big = f"-M do -s {int(size) - 28} " if size.isdigit() and int(size) > 28 else ""
        lines.append(
            f"(ping -c 1 -W 2 {big}{shlex.quote(address)} >/dev/null 2>&1; echo {index} $?) &\n"
        )
        if index % wave == wave - 1:
            lines.append("wait\n")
    return "".join(lines) + "wait\nfi\n"


# Echo requests to every address from one ICMP socket (raw as root, else the kernel's ping
# socket where net.ipv4.ping_group_range allows it), the replies matched by sequence number
# and source; Python 3.9. Exit 3 when no ICMP socket can be opened.
PINGER = """
import os, select, socket, struct, sys, time
addrs, sizes = [], []
for arg in sys.argv[1:]:
    a, _, size = arg.partition("@")
    try:
        if socket.inet_ntoa(socket.inet_aton(a)) != a:
            sys.exit(3)
    except OSError:
        sys.exit(3)  # not an IPv4 address in dotted quads: ping's own turn
    if size and not (size.isdigit() and 92 <= int(size) <= 65520):
        sys.exit(3)
    addrs.append(a)
    sizes.append(int(size) if size else 0)
def checksum(b):
    if len(b) % 2:
        b += b"\\0"
    total = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF
raw = True
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
except OSError:
    raw = False
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    except OSError:
        sys.exit(3)
# what arrives beyond our replies (others' echo requests, on a raw socket) must not fill
# the buffer before the replies are read
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
if any(sizes):
    # never fragmented (IP_MTU_DISCOVER = IP_PMTUDISC_DO): a path that cannot carry a frame
    # of its size does not answer
    s.setsockopt(socket.IPPROTO_IP, 10, 2)
ident, got = os.getpid() & 0xFFFF, set()
def send(i):
    pad = sizes[i] - 28 if sizes[i] else 56  # IP (20) and ICMP (8) headers
    body = struct.pack("!HH", ident, i) + (b"halo" * (pad // 4 + 1))[:pad]
    head = struct.pack("!BBH", 8, 0, checksum(b"\\x08\\0\\0\\0" + body))
    try:
        s.sendto(head + body, (addrs[i], 0))
    except OSError:
        pass
def receive(wait):
    # the replies that arrive within ``wait`` seconds (0: those already there)
    end = time.monotonic() + wait
    while len(got) < len(addrs):
        ready, _, _ = select.select([s], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            return
        data, peer = s.recvfrom(65536)
        if raw:
            data = data[(data[0] & 15) * 4:]
        if len(data) < 8 or data[0] != 0:
            continue
        their, seq = struct.unpack("!HH", data[4:8])
        if (raw and their != ident) or seq >= len(addrs) or addrs[seq] != peer[0]:
            continue
        got.add(seq)
# an echo to each address 2 ms apart (a burst to many unresolved neighbours is a burst of
# ARP), again every 0.5 s to those that have not answered; 2 s in all
start = time.monotonic()
for round in range(4):
    for i in range(len(addrs)):
        if i not in got:
            send(i)
            receive(0.002)
    receive(start + 0.5 * (round + 1) - time.monotonic())
    if len(got) == len(addrs):
        break
for i in range(len(addrs)):
    print(i, 0 if i in got else 1)
"""


def parse_pings(text: str, count: int) -> set[int]:
    """The indexes whose ping answered (exit 0) in ``ping_script``'s output; any other
    line, or an index out of range, is passed over."""
    answered = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1] == "0" and int(parts[0]) < count:
            answered.add(int(parts[0]))
    return answered


def _done(progress: Callable[[str], None] | None, report: NodeReport) -> NodeReport:
    if progress is not None:
        progress(report.node.name)
    return report
