"""Gather every node's inventory (and fabric reachability) in parallel, one client per node."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from halo_cluster.checks.context import NodeReport
from halo_cluster.client.fanout import each
from halo_cluster.client.node import NodeClient, escaped, first_bytes
from halo_cluster.config import Config, NodeConfig
from halo_cluster.facts.model import inventory_from_dict
from halo_cluster.jsonin import loads
from halo_cluster.nodecode import problem
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
    return each(chosen, lambda node: _done(progress, _report(config, clients[node.name])))


def _report(config: Config, client: NodeClient) -> NodeReport:
    """The node's inventory (its node code, inside its exec_prefix) and, at the same time,
    its host's view of the fabric (pings to every peer, ``ethtool -i``: one host script)."""
    node = client.node
    peers = {p.name: p.fabric_address for p in config.nodes if p.name != node.name}
    targets = {name: address for name, address in peers.items() if address}
    with ThreadPoolExecutor(1, thread_name_prefix="halo-host") as pool:
        host = pool.submit(host_view, client, targets, node.fabric_address)
        result = client.call(*inventory_args(versions=True), timeout=INVENTORY_TIMEOUT_S)
        pings, ethtool = host.result()
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
    return NodeReport(node, inv, None, pings, ethtool, code_sent=client.sent)


def host_view(
    client: NodeClient, targets: Mapping[str, str], fabric_address: str | None
) -> tuple[dict[str, bool], dict[str, str] | None]:
    """On the node's host (the fabric is the machine's, not the container's), in one call:
    whether each target answers a ping, and ``ethtool -i`` of the interface that holds
    ``fabric_address`` (None when there is none, or no ethtool)."""
    names = list(targets)
    waves = -(-len(names) // PING_WAVE)  # each wave ends within ping's own 2 s
    script = ping_script([targets[n] for n in names]) if names else ""
    if fabric_address:
        script += ethtool_script(fabric_address)
    if not script:
        return {}, None
    done = client.host_script(script, timeout=PING_TIMEOUT_S + 2 * waves)
    if not done.ok:
        return dict.fromkeys(names, False), None
    pings_text, _, ethtool_text = done.stdout.partition(ETHTOOL_MARK)
    answered = parse_pings(pings_text, len(names))
    iface, _, output = ethtool_text.partition("\n")
    pings = {name: index in answered for index, name in enumerate(names)}
    return pings, ({iface.strip(): output} if iface.strip() else None)


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
    allowed — one ``ping -c 1 -W 2`` per address, ``wave`` at once. Addresses are quoted:
    nothing in them is run."""
    quoted = " ".join(shlex.quote(a) for a in addresses)
    lines = [f"if ! python3 -I -S -c {shlex.quote(PINGER)} {quoted} 2>/dev/null; then\n"]
    for index, address in enumerate(addresses):
        lines.append(
            f"(ping -c 1 -W 2 {shlex.quote(address)} >/dev/null 2>&1; echo {index} $?) &\n"
        )
        if index % wave == wave - 1:
            lines.append("wait\n")
    return "".join(lines) + "wait\nfi\n"


# Echo requests to every address from one ICMP socket (raw as root, else the kernel's ping
# socket where net.ipv4.ping_group_range allows it), the replies matched by sequence number
# and source; Python 3.9. Exit 3 when no ICMP socket can be opened.
PINGER = """
import os, select, socket, struct, sys, time
addrs = sys.argv[1:]
for a in addrs:
    try:
        if socket.inet_ntoa(socket.inet_aton(a)) != a:
            sys.exit(3)
    except OSError:
        sys.exit(3)  # not an IPv4 address in dotted quads: ping's own turn
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
ident, got = os.getpid() & 0xFFFF, set()
def send(i):
    body = struct.pack("!HH", ident, i) + b"halo" * 14
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
        data, peer = s.recvfrom(4096)
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
