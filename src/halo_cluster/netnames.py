"""The names and addresses halo hands to the network and to the engines, checked once: an
interface name NCCL/Gloo can be given, a node's address, a host a server binds to. Each
``*_problem`` function returns why a value cannot be used (a phrase that follows the value
in a message), or None when it can. Pure; runs on nodes too (Python 3.9)."""

from __future__ import annotations

import ipaddress
import re

IFNAME_MAX_BYTES = 15  # the kernel's IFNAMSIZ (16) less its NUL
HOST_MAX = 253  # a DNS name's longest text form
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")  # used with fullmatch
# the kernel refuses '/', ':' and whitespace; NCCL_SOCKET_IFNAME reads ',' as a list and a
# leading '^' or '=' as its own prefixes
_IFNAME_REFUSED = "/:,"
_NOT_A_HOST = "is neither an IP address nor a host name of ASCII letters, digits, '-' and '.'"
# a node's name in halo.toml (used with fullmatch): also a name in /etc/hosts
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def ifname_problem(name: str) -> str | None:
    """Why ``name`` is not an interface name NCCL and Gloo can be pointed at (None: it is).

    The kernel's rules (at most 15 bytes; not '.' or '..'; no '/', ':' or whitespace), plus
    what a name must be to travel in an environment variable and be read back: UTF-8 (a
    name read from a node is decoded with U+FFFD for each byte that is not, so U+FFFD
    marks it), printable, no ',' and no leading '^' or '='."""
    if not name:
        return "is empty"
    if "\ufffd" in name or any("\ud800" <= c <= "\udfff" for c in name):
        return "is not UTF-8"
    if len(name.encode()) > IFNAME_MAX_BYTES:
        return f"is longer than {IFNAME_MAX_BYTES} bytes"
    if name in (".", ".."):
        return "is '.' or '..'"
    if any(c in _IFNAME_REFUSED or c.isspace() for c in name):
        return "holds '/', ':', ',' or whitespace"
    if not name.isprintable():
        return "holds a control character"
    if name[0] in "^=":
        return "starts with '^' or '=' (NCCL_SOCKET_IFNAME's own prefixes)"
    return None


def node_address_problem(text: str) -> str | None:
    """Why ``text`` is not an address a node can be reached at (None: it is): an IPv4
    address, not 0.0.0.0 (every interface, no one's address), multicast or reserved
    (240.0.0.0/4, 255.255.255.255 among them)."""
    try:
        address = ipaddress.IPv4Address(text)
    except ValueError:
        return "is not an IPv4 address"
    if address.is_unspecified:
        return "is 0.0.0.0 (every interface): give the node's own address"
    if address.is_multicast:
        return "is a multicast address: give the node's own address"
    if address.is_reserved:
        return "is a reserved address (240.0.0.0/4): give the node's own address"
    return None


def interface_address_problem(cidr: str) -> str | None:
    """Why ``cidr`` (``192.168.100.1/30``) is not an address to put on an interface (None:
    it is): a node's address (``node_address_problem``) with a prefix length, neither the
    network's own address nor its broadcast address."""
    address, _slash, length = cidr.partition("/")
    problem = node_address_problem(address)
    if problem is not None:
        return problem
    if length not in {str(n) for n in range(1, 33)}:  # ASCII digits 1-32, no sign, no zeros
        return "needs a prefix length, e.g. 192.168.100.1/30"
    iface = ipaddress.IPv4Interface(f"{address}/{int(length)}")
    if iface.network.prefixlen < 31 and iface.ip in (
        iface.network.network_address,
        iface.network.broadcast_address,
    ):
        return f"is the network or broadcast address of {iface.network}"
    return None


def bind_host_problem(host: str) -> str | None:
    """Why ``host`` is not something a server can bind to (None: it is): an IP address (v4
    or v6, 0.0.0.0 and :: included) or a host name of ASCII letters, digits, '-' and '.'
    (at most 253 characters, labels of 1-63 that neither start nor end with '-')."""
    if not host.isascii() or not host.isprintable():
        return _NOT_A_HOST
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:  # an IPv6 scope (fe80::1%eth0) names an interface
        scope = host.partition("%")[2]
        if scope and ifname_problem(scope) is not None:
            return "has a scope (after '%') that is not an interface name"
        return None
    if not host or len(host) > HOST_MAX:
        return f"is neither an IP address nor a host name of 1-{HOST_MAX} characters"
    if not all(_LABEL.fullmatch(label) for label in host.removesuffix(".").split(".")):
        return _NOT_A_HOST
    return None
