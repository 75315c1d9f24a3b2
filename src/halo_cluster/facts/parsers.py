"""Pure parsers for the values found in sysfs, procfs and /etc.

Every function takes the text of one file and returns a value, or raises ParseError.
None of them touches the filesystem: readers (see ``root.py``) do that.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from halo_cluster.errors import ParseError

_NUMBERED_NAME = re.compile(r"^\s*(\d+)\s*:\s*(\S.*?)\s*$")
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec\b")
_GID = re.compile(r"^[0-9a-f]{4}(?::[0-9a-f]{4}){7}$")
_LEADING_FLOAT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s")
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
_EMPTY_LINK_LOCAL_GID = "fe80:0000:0000:0000:0000:0000:0000:0000"


MAX_DIGITS = 20  # 2**64 has 20 digits: no kernel counter or attribute is longer


def is_uint(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` also accepts characters such as '²'), and no more
    of them than a 64-bit counter has."""
    return text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS


def _one_line(text: str, what: str) -> str:
    """The single non-empty line of ``text`` (blank lines and missing newlines tolerated)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise ParseError(f"expected one line of {what}", text)
    return lines[0]


def parse_int(text: str) -> int:
    """``"9000\\n"`` -> 9000 (decimal or 0x-prefixed hex)."""
    line = _one_line(text, "an integer")
    if len(line.lstrip("-+")) > MAX_DIGITS + 2:  # 0x prefix
        raise ParseError("a number too large for a kernel attribute", text)
    try:
        return int(line, 0) if line.lower().startswith("0x") else int(line)
    except ValueError:
        raise ParseError("not an integer", text) from None


def parse_counter(text: str) -> int | None:
    """A counter file: an unsigned integer, or None for ``N/A (no PMA)``.

    IB PMA counters read ``N/A (no PMA)`` when the management datagram fails
    (seen on i40iw): the counter exists but has no value.
    """
    line = _one_line(text, "a counter")
    if line.startswith("N/A"):
        return None
    if not is_uint(line):
        raise ParseError("not a counter value", text)
    return int(line)


def parse_numbered_name(text: str) -> str:
    """``"4: ACTIVE"`` -> ``"ACTIVE"``; used for port state, phys_state and node_type."""
    match = _NUMBERED_NAME.match(_one_line(text, "'N: NAME'"))
    if not match:
        raise ParseError("expected 'N: NAME'", text)
    return match.group(2)


def parse_rate_gbps(text: str) -> float:
    """``"100 Gb/sec (4X EDR)"`` -> 100.0; ``"2.5 Gb/sec (1X SDR)"`` -> 2.5."""
    match = _RATE.match(_one_line(text, "a port rate"))
    if not match:
        raise ParseError("expected 'N Gb/sec (...)'", text)
    return float(match.group(1))


def parse_gid(text: str) -> str:
    """A GID as sysfs prints it: 8 groups of 4 lowercase hex digits, uncompressed."""
    line = _one_line(text, "a GID").lower()
    if not _GID.match(line):
        raise ParseError("expected a GID of 8 groups of 4 hex digits", text)
    return line


def gid_is_populated(gid: str) -> bool:
    """Unused GID table entries read as all zeros (or the bare link-local prefix)."""
    return gid not in (_ZERO_GID, _EMPTY_LINK_LOCAL_GID)


def gid_ipv4(gid: str) -> str | None:
    """The IPv4 address of an IPv4-mapped GID (``::ffff:a.b.c.d``), else None."""
    groups = gid.split(":")
    if groups[:6] != ["0000", "0000", "0000", "0000", "0000", "ffff"]:
        return None
    packed = int(groups[6] + groups[7], 16)
    return str(ipaddress.IPv4Address(packed))


def parse_text(text: str) -> str:
    """A one-line free-text attribute (``fw_ver``, ``link_layer``, ``operstate``)."""
    return _one_line(text, "text")


def parse_optional_text(text: str) -> str | None:
    """Like parse_text, but an empty file is None (``node_desc`` may be empty)."""
    stripped = text.strip()
    if not stripped:
        return None
    return parse_text(text)


def parse_pcie_speed_gts(text: str) -> float | None:
    """``"16.0 GT/s PCIe"`` -> 16.0; old kernels print ``"8 GT/s"``; ``"Unknown"`` -> None."""
    line = _one_line(text, "a PCIe link speed")
    if line.startswith("Unknown"):
        return None
    match = _LEADING_FLOAT.match(line)
    if not match:
        raise ParseError("expected 'N GT/s'", text)
    return float(match.group(1))


def parse_speed_mbps(text: str) -> int | None:
    """Netdev ``speed``: Mb/s, with -1 (and the unsigned 4294967295) meaning unknown."""
    value = parse_int(text)
    if value < 0 or value >= 0xFFFFFFFF:
        return None
    return value


MAX_MTU = (1 << 31) - 1  # sysfs prints the MTU as a signed int: above it shows negative


def parse_mtu(text: str) -> int:
    """Netdev ``mtu``: bytes, 0 to 2**31 - 1 (a negative one is garbage, not a size)."""
    value = parse_int(text)
    if not 0 <= value <= MAX_MTU:
        raise ParseError(f"an MTU outside 0-{MAX_MTU}", text)
    return value


def parse_key_values(text: str, sep: str = "=") -> dict[str, str]:
    """``KEY=value`` lines (os-release style; quotes removed, comments skipped)."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, found, value = line.partition(sep)
        if not found or not key.strip():
            raise ParseError(f"expected KEY{sep}VALUE lines", text)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def parse_meminfo_total_kib(text: str) -> int:
    """``MemTotal:  131072000 kB`` -> 131072000."""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and is_uint(parts[1]):
                return int(parts[1])
            break
    raise ParseError("no 'MemTotal: N kB' line", text)


def parse_memlock_bytes(text: str) -> int | None:
    """The soft ``Max locked memory`` limit from ``/proc/<pid>/limits``; None = unlimited."""
    for line in text.splitlines():
        if line.startswith("Max locked memory"):
            soft = line[len("Max locked memory") :].split()
            if soft and soft[0] == "unlimited":
                return None
            if soft and is_uint(soft[0]):
                return int(soft[0])
            break
    raise ParseError("no 'Max locked memory' line", text)


def parse_fib_trie_local(text: str) -> list[str]:
    """Addresses marked ``/32 host LOCAL`` in ``/proc/net/fib_trie`` (both tables, once each).

    fib_trie lists every address the host owns, but not the interface: that comes
    from the prefix routes in ``/proc/net/route``.
    """
    found: list[str] = []
    last_leaf: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("|-- "):
            last_leaf = line[4:].strip()
        elif line.startswith("/32 host LOCAL") and last_leaf is not None:
            if last_leaf not in found:
                found.append(last_leaf)
        elif line and not (line.startswith(("+-- ", "/")) or line.endswith(":")):
            raise ParseError("unexpected line in fib_trie", text)
    for address in found:
        try:
            ipaddress.IPv4Address(address)
        except ValueError:
            raise ParseError("bad address in fib_trie", text) from None
    return found


@dataclass(frozen=True)
class Route:
    """One row of ``/proc/net/route``; addresses as dotted strings."""

    iface: str
    destination: str
    gateway: str
    mask: str
    metric: int

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"{self.destination}/{self.mask}", strict=False)


def _le_hex_ipv4(value: str, text: str) -> str:
    """``/proc/net/route`` prints addresses as host-order (little-endian) hex."""
    try:
        packed = int(value, 16)
    except ValueError:
        raise ParseError("bad hex address in route table", text) from None
    return str(ipaddress.IPv4Address(packed.to_bytes(4, "little")))


def parse_route(text: str) -> list[Route]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("Iface"):
        raise ParseError("route table without its 'Iface' header", text)
    routes: list[Route] = []
    for line in lines[1:]:
        cols = line.split()
        if len(cols) < 8 or not is_uint(cols[6]):
            raise ParseError("route row with too few columns", text)
        routes.append(
            Route(
                iface=cols[0],
                destination=_le_hex_ipv4(cols[1], text),
                gateway=_le_hex_ipv4(cols[2], text),
                mask=_le_hex_ipv4(cols[7], text),
                metric=int(cols[6]),
            )
        )
    return routes


def parse_if_inet6(text: str) -> list[tuple[str, str]]:
    """``/proc/net/if_inet6`` rows -> [(iface, "addr/prefixlen")] with compressed addresses."""
    rows: list[tuple[str, str]] = []
    for line in text.splitlines():
        cols = line.split()
        if not cols:
            continue
        if len(cols) != 6 or len(cols[0]) != 32:
            raise ParseError("if_inet6 row is not 6 columns", text)
        try:
            address = ipaddress.IPv6Address(int(cols[0], 16))
            prefix = int(cols[2], 16)
        except ValueError:
            raise ParseError("bad address in if_inet6", text) from None
        rows.append((cols[5], f"{address}/{prefix}"))
    return rows


def parse_properties(text: str) -> dict[str, int]:
    """KFD topology ``properties``: ``name value`` integer lines."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        cols = line.split()
        if not cols:
            continue
        if len(cols) != 2 or not is_uint(cols[1].removeprefix("-")):
            raise ParseError("expected 'name integer' lines", text)
        values[cols[0]] = int(cols[1])
    return values


def gfx_name(target_version: int) -> str | None:
    """KFD ``gfx_target_version`` 110501 -> ``gfx1151`` (major, minor, stepping in hex)."""
    if target_version <= 0:
        return None
    major, rest = divmod(target_version, 10000)
    minor, stepping = divmod(rest, 100)
    return f"gfx{major}{minor:x}{stepping:x}"


def parse_nvidia_information(text: str) -> dict[str, str]:
    """``/proc/driver/nvidia/gpus/<bdf>/information``: ``Key:   value`` lines."""
    return parse_key_values(text, sep=":")


def parse_cmdline(text: str) -> str:
    """The kernel command line, without the trailing newline (may contain NULs in odd roots)."""
    return " ".join(text.replace("\0", " ").split())
