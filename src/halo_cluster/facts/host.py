"""Host software facts: rdma-core, firewall configuration, AMD memory limits, container."""

from __future__ import annotations

import re

from halo_cluster.facts import parsers as p
from halo_cluster.facts.model import AmdMemory, Firewall, RdmaCore
from halo_cluster.facts.root import Root

LIB_DIRS = ("usr/lib64", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib")
LIBIBVERBS = re.compile(r"^libibverbs\.so\.1\.\d+\.(\d+)\.0$")
_PROVIDER = re.compile(r"^lib(.+)-rdmav\d+\.so$")
_ZONE_IFACE = re.compile(r"<interface\s+name=\"([^\"]+)\"\s*/>")
_UFW_ALLOW_IN = re.compile(r"^### tuple ### allow any any \S+ any \S+ in_(\S+)", re.MULTILINE)


def read_rdma_core(root: Root) -> RdmaCore:
    for directory in LIB_DIRS:
        for name in root.listdir(directory):
            match = LIBIBVERBS.match(name)
            if match:
                providers = tuple(
                    m.group(1)
                    for entry in root.listdir(f"{directory}/libibverbs")
                    if (m := _PROVIDER.match(entry))
                )
                return RdmaCore(int(match.group(1)), f"/{directory}/{name}", providers)
    return RdmaCore(None, None, ())


def read_firewall(root: Root) -> Firewall:
    if root.is_dir("etc/firewalld"):
        return _firewalld(root)
    ufw = root.parse("etc/ufw/ufw.conf", p.parse_key_values)
    if ufw and ufw.get("ENABLED", "").lower() == "yes":
        rules = root.read("etc/ufw/user.rules") or ""
        return Firewall("ufw", None, {}, tuple(_UFW_ALLOW_IN.findall(rules)))
    return Firewall(None, None, {}, ())


def _firewalld(root: Root) -> Firewall:
    conf = root.parse("etc/firewalld/firewalld.conf", p.parse_key_values) or {}
    zones: dict[str, str] = {}
    for name in root.listdir("etc/firewalld/zones"):
        if name.endswith(".xml"):
            for iface in _ZONE_IFACE.findall(root.read(f"etc/firewalld/zones/{name}") or ""):
                zones[iface] = name[: -len(".xml")]
    trusted = tuple(iface for iface, zone in zones.items() if zone == "trusted")
    return Firewall("firewalld", conf.get("DefaultZone", "public"), zones, trusted)


def read_amd_memory(root: Root) -> AmdMemory:
    return AmdMemory(
        gttsize_mib=root.parse("sys/module/amdgpu/parameters/gttsize", p.parse_int),
        ttm_pages_limit=root.parse("sys/module/ttm/parameters/pages_limit", p.parse_int),
        ttm_page_pool_size=root.parse("sys/module/ttm/parameters/page_pool_size", p.parse_int),
    )


def read_container(root: Root) -> str | None:
    """The container engine this root runs in, from the marker files engines leave."""
    if root.exists("run/.containerenv"):
        return "podman"
    if root.exists(".dockerenv"):
        return "docker"
    return None
