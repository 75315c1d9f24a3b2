"""Value parsers: tables of real samples, and properties (never a crash, only ParseError)."""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.errors import ParseError
from halo_cluster.facts import parsers as p

SAMPLES: list[tuple[Callable[[str], Any], str, Any]] = [
    (p.parse_numbered_name, "4: ACTIVE\n", "ACTIVE"),
    (p.parse_numbered_name, "1: DOWN\n", "DOWN"),
    (p.parse_numbered_name, "5: ACTIVE_DEFER\n", "ACTIVE_DEFER"),
    (p.parse_numbered_name, "5: LinkUp\n", "LinkUp"),
    (p.parse_numbered_name, "3: Disabled", "Disabled"),
    (p.parse_numbered_name, "4: PortConfigurationTraining\n", "PortConfigurationTraining"),
    (p.parse_numbered_name, "7: Phy Test\n", "Phy Test"),
    (p.parse_numbered_name, "\n1: CA\n\n", "CA"),
    (p.parse_numbered_name, "4: RNIC\n", "RNIC"),
    (p.parse_numbered_name, "8: <unknown>\n", "<unknown>"),
    (p.parse_rate_gbps, "100 Gb/sec (4X EDR)\n", 100.0),
    (p.parse_rate_gbps, "25 Gb/sec (1X EDR)\n", 25.0),
    (p.parse_rate_gbps, "2.5 Gb/sec (1X SDR)\n", 2.5),
    (p.parse_rate_gbps, "10 Gb/sec (1X FDR10)\n", 10.0),
    (p.parse_rate_gbps, "400 Gb/sec (4X NDR)\n", 400.0),
    (p.parse_rate_gbps, "10 Gb/sec (4X)\n", 10.0),
    (p.parse_rate_gbps, "56 Gb/sec (4X FDR)", 56.0),
    (p.parse_counter, "123456789\n", 123456789),
    (p.parse_counter, "N/A (no PMA)\n", None),
    (p.parse_counter, "\n42\n\n", 42),
    (p.parse_counter, "18446744073709551615\n", 18446744073709551615),
    (p.parse_int, "9000\n", 9000),
    (p.parse_int, "0x1a\n", 26),
    (p.parse_int, "-1\n", -1),
    (p.parse_speed_mbps, "100000\n", 100000),
    (p.parse_speed_mbps, "-1\n", None),
    (p.parse_speed_mbps, "4294967295\n", None),
    (p.parse_pcie_speed_gts, "16.0 GT/s PCIe\n", 16.0),
    (p.parse_pcie_speed_gts, "2.5 GT/s PCIe\n", 2.5),
    (p.parse_pcie_speed_gts, "8 GT/s\n", 8.0),
    (p.parse_pcie_speed_gts, "Unknown\n", None),
    (p.parse_pcie_speed_gts, "Unknown speed\n", None),
    (
        p.parse_gid,
        "fe80:0000:0000:0000:6efe:54ff:fe3d:8a39\n",
        "fe80:0000:0000:0000:6efe:54ff:fe3d:8a39",
    ),
    (
        p.parse_gid,
        "0000:0000:0000:0000:0000:FFFF:0A16:74DD",
        "0000:0000:0000:0000:0000:ffff:0a16:74dd",
    ),
    (p.parse_optional_text, "\n", None),
    (p.parse_optional_text, "1.72\n", "1.72"),
    (p.parse_meminfo_total_kib, "MemTotal:       130511264 kB\nMemFree: 1 kB\n", 130511264),
    (p.parse_cmdline, "ro quiet iommu=pt\n", "ro quiet iommu=pt"),
    (
        p.parse_properties,
        "simd_count 80\ngfx_target_version 110501\n",
        {"simd_count": 80, "gfx_target_version": 110501},
    ),
]


@pytest.mark.parametrize(("parser", "text", "expected"), SAMPLES)
def test_real_samples(parser: Callable[[str], Any], text: str, expected: Any) -> None:
    assert parser(text) == expected


BAD: list[tuple[Callable[[str], Any], str]] = [
    (p.parse_numbered_name, "ACTIVE\n"),
    (p.parse_numbered_name, ""),
    (p.parse_numbered_name, "4: ACTIVE\n1: DOWN\n"),
    (p.parse_rate_gbps, "fast\n"),
    (p.parse_counter, "lots\n"),
    (p.parse_counter, "-5\n"),
    (p.parse_int, "jumbo\n"),
    (p.parse_gid, "not-a-gid\n"),
    (p.parse_gid, "fe80::1\n"),
    (p.parse_pcie_speed_gts, "fast PCIe\n"),
    (p.parse_meminfo_total_kib, "MemFree: 1 kB\n"),
    (p.parse_memlock_bytes, "Max open files 1024 1024 files\n"),
    (p.parse_route, "eth0 00000000\n"),
    (p.parse_if_inet6, "zz 01 80 10 80 lo\n"),
    (p.parse_properties, "gfx_target_version banana\n"),
    (p.parse_key_values, "no equals sign here\n"),
]


@pytest.mark.parametrize(("parser", "text"), BAD)
def test_garbage_is_a_parse_error_naming_the_content(
    parser: Callable[[str], Any], text: str
) -> None:
    with pytest.raises(ParseError) as info:
        parser(text)
    assert repr(text)[1:-1][:20] in str(info.value)


def test_memlock_limits() -> None:
    unlimited = (
        "Limit                     Soft Limit           Hard Limit           Units\n"
        "Max locked memory         unlimited            unlimited            bytes\n"
    )
    limited = "Max locked memory         8388608              8388608              bytes\n"
    assert p.parse_memlock_bytes(unlimited) is None
    assert p.parse_memlock_bytes(limited) == 8388608


def test_gid_ipv4_and_population() -> None:
    assert p.gid_ipv4("0000:0000:0000:0000:0000:ffff:0a16:74dd") == "10.22.116.221"
    assert p.gid_ipv4("fe80:0000:0000:0000:6efe:54ff:fe3d:8a39") is None
    assert not p.gid_is_populated("0000:0000:0000:0000:0000:0000:0000:0000")
    assert not p.gid_is_populated("fe80:0000:0000:0000:0000:0000:0000:0000")
    assert p.gid_is_populated("fe80:0000:0000:0000:6efe:54ff:fe3d:8a39")


def test_gfx_names() -> None:
    assert p.gfx_name(110501) == "gfx1151"
    assert p.gfx_name(90010) == "gfx90a"
    assert p.gfx_name(110000) == "gfx1100"
    assert p.gfx_name(0) is None


def test_route_and_fib_trie_from_a_real_capture() -> None:
    route = (
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eno1\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
        "enp194s0np0\t0064A8C0\t00000000\t0001\t0\t0\t100\tFCFFFFFF\t0\t0\t0\n"
    )
    routes = p.parse_route(route)
    assert routes == [
        p.Route("eno1", "0.0.0.0", "10.0.0.1", "0.0.0.0", 0),
        p.Route("enp194s0np0", "192.168.100.0", "0.0.0.0", "255.255.255.252", 100),
    ]
    assert str(routes[1].network) == "192.168.100.0/30"
    trie = (
        "Main:\n  +-- 0.0.0.0/0 3 0 5\n     +-- 192.168.100.0/30 2 0 1\n        |-- 192.168.100.0\n"
        "           /30 link UNICAST\n        |-- 192.168.100.1\n           /32 host LOCAL\n"
        "        |-- 192.168.100.3\n           /32 link BROADCAST\nLocal:\n  +-- 0.0.0.0/0 3 0 5\n"
        "        |-- 192.168.100.1\n           /32 host LOCAL\n"
    )
    assert p.parse_fib_trie_local(trie) == ["192.168.100.1"]


def test_if_inet6() -> None:
    text = (
        "00000000000000000000000000000001 01 80 10 80       lo\n"
        "fe80000000000000706213fffeb4eee7 05 40 20 80 enp194s0np0\n"
    )
    assert p.parse_if_inet6(text) == [
        ("lo", "::1/128"),
        ("enp194s0np0", "fe80::7062:13ff:feb4:eee7/64"),
    ]


# -- properties ------------------------------------------------------------------------
PARSERS = [
    p.parse_int,
    p.parse_counter,
    p.parse_numbered_name,
    p.parse_rate_gbps,
    p.parse_gid,
    p.parse_text,
    p.parse_optional_text,
    p.parse_pcie_speed_gts,
    p.parse_speed_mbps,
    p.parse_key_values,
    p.parse_meminfo_total_kib,
    p.parse_memlock_bytes,
    p.parse_fib_trie_local,
    p.parse_route,
    p.parse_if_inet6,
    p.parse_properties,
    p.parse_nvidia_information,
    p.parse_cmdline,
]


@pytest.mark.parametrize("parser", PARSERS, ids=lambda f: f.__name__)
@given(text=st.text(max_size=200))
def test_any_text_parses_or_raises_parse_error(parser: Callable[[str], Any], text: str) -> None:
    with contextlib.suppress(ParseError):
        parser(text)


@given(st.integers(min_value=0, max_value=2**64 - 1), st.sampled_from(["\n", "", "\n\n"]))
def test_counter_round_trip(value: int, ending: str) -> None:
    assert p.parse_counter(f"{value}{ending}") == value


@given(st.ip_addresses(v=4))
def test_mapped_gid_round_trip(address: ipaddress.IPv4Address) -> None:
    b = address.packed
    gid = f"0000:0000:0000:0000:0000:ffff:{b[0]:02x}{b[1]:02x}:{b[2]:02x}{b[3]:02x}"
    assert p.gid_ipv4(p.parse_gid(gid + "\n")) == str(address)


@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[a-z][a-z0-9]{0,10}", fullmatch=True),
            st.builds(
                lambda a, n: ipaddress.IPv4Network((int(a), n), strict=False),
                st.ip_addresses(v=4),
                st.integers(0, 32),
            ),
            st.integers(0, 1000),
        ),
        max_size=8,
    )
)
def test_route_round_trip(rows: list[tuple[str, ipaddress.IPv4Network, int]]) -> None:
    def le(addr: ipaddress.IPv4Address) -> str:
        return addr.packed[::-1].hex().upper()

    text = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    for iface, net, metric in rows:
        cols = [iface, le(net.network_address), "00000000", "0001", "0", "0", str(metric)]
        text += "\t".join([*cols, le(net.netmask), "0", "0", "0"]) + "\n"
    parsed = p.parse_route(text)
    assert [(r.iface, r.network, r.metric) for r in parsed] == rows


@given(st.floats(min_value=0.1, max_value=1000, allow_nan=False).map(lambda f: round(f, 1)))
def test_rate_round_trip(rate: float) -> None:
    assert p.parse_rate_gbps(f"{rate:g} Gb/sec (4X EDR)\n") == pytest.approx(rate)
