"""Network interfaces from ``sys/class/net``; addresses from ``proc/net`` so that a
fixture root carries them (no netlink, no ``ip`` needed)."""

from __future__ import annotations

import ipaddress

from halo_cluster.facts import parsers as p
from halo_cluster.facts.model import NetInterface
from halo_cluster.facts.root import Root, decoded_name, nearest_pci

CLASS_DIR = "sys/class/net"
_ARPHRD_INFINIBAND = 32
_ARPHRD_LOOPBACK = 772
_THUNDERBOLT_DRIVERS = {"thunderbolt-net", "thunderbolt_net"}
_LOOPBACK_NET = ipaddress.IPv4Network("127.0.0.0/8")


def read_interfaces(root: Root) -> tuple[NetInterface, ...]:
    ipv4 = _ipv4_by_interface(root)
    ipv6: dict[str, list[str]] = {}
    for iface, address in root.parse("proc/net/if_inet6", p.parse_if_inet6) or []:
        ipv6.setdefault(iface, []).append(address)
    interfaces = []
    for name in root.listdir(CLASS_DIR):
        base = f"{CLASS_DIR}/{name}"
        if not root.is_dir(base):  # e.g. bonding_masters
            continue
        shown = decoded_name(name)
        interfaces.append(_read_interface(root, name, ipv4.get(shown, []), ipv6.get(shown, [])))
    return tuple(interfaces)


def _read_interface(root: Root, name: str, ipv4: list[str], ipv6: list[str]) -> NetInterface:
    base = f"{CLASS_DIR}/{name}"
    driver = root.link_name(f"{base}/device/driver")
    device_path = root.resolve(f"{base}/device")
    return NetInterface(
        name=decoded_name(name),
        kind=_kind(root, base, name, driver, device_path),
        mtu=root.parse(f"{base}/mtu", p.parse_mtu),
        state=root.parse(f"{base}/operstate", p.parse_text),
        # speed answers EINVAL while the link is down: that is "unknown", not an error.
        speed_mbps=root.parse(f"{base}/speed", p.parse_speed_mbps, quiet=True),
        driver=driver,
        pci=nearest_pci(device_path),
        ipv4=tuple(ipv4),
        ipv6=tuple(ipv6),
    )


def _kind(root: Root, base: str, name: str, driver: str | None, device: str | None) -> str:
    arp_type = root.parse(f"{base}/type", p.parse_int)
    if arp_type == _ARPHRD_LOOPBACK or name == "lo":
        return "loopback"
    if arp_type == _ARPHRD_INFINIBAND:
        return "infiniband"
    if driver in _THUNDERBOLT_DRIVERS or name.startswith("thunderbolt"):
        return "thunderbolt"
    if root.exists(f"{base}/wireless") or root.exists(f"{base}/phy80211"):
        return "wireless"
    if device is None:
        return "virtual"
    return "ethernet"


def _ipv4_by_interface(root: Root) -> dict[str, list[str]]:
    """Local addresses (fib_trie) placed on the interface of their longest prefix route."""
    local = root.parse("proc/net/fib_trie", p.parse_fib_trie_local) or []
    routes = [
        route
        for route in root.parse("proc/net/route", p.parse_route) or []
        if route.mask != "0.0.0.0" and route.gateway == "0.0.0.0"
    ]
    found: dict[str, list[str]] = {}
    for text in local:
        address = ipaddress.IPv4Address(text)
        if address in _LOOPBACK_NET:
            # 127/8 lives in the local table only, never in /proc/net/route.
            if text == "127.0.0.1":
                found.setdefault("lo", []).append(f"{text}/8")
            continue
        matches = [route for route in routes if address in route.network]
        if not matches:
            root.warn(f"/proc/net/fib_trie: address {text} has no prefix route; interface unknown")
            continue
        best = max(matches, key=lambda route: (route.network.prefixlen, -route.metric))
        found.setdefault(best.iface, []).append(f"{text}/{best.network.prefixlen}")
    return found
