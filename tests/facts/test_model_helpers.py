"""The small questions every layer asks of an inventory, answered in one place."""

from __future__ import annotations

from halo_cluster.bench.net_legs import interface_for
from halo_cluster.facts.inventory import collect_inventory
from tests.conftest import ROOTS


def test_interface_with_address() -> None:
    inv = collect_inventory(str(ROOTS / "strix-e810"))
    fabric = inv.interface_with_address("192.168.100.1")
    assert fabric is not None and fabric.name == "enp194s0np0"
    mgmt = inv.interface_with_address("192.168.1.51")
    assert mgmt is not None and mgmt.name == "enp191s0"
    assert inv.interface_with_address("192.168.100.2") is None  # the peer's, not ours
    assert inv.interface_with_address("192.168.100") is None  # whole addresses only
    assert inv.interface_with_address(None) is None and inv.interface_with_address("") is None
    assert interface_for(inv, "192.168.100.1") == fabric and interface_for(None, "x") is None
