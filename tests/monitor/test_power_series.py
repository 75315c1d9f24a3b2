"""The exporter's power series: watts from the node's power gauges, and a joules counter per
energy source that never goes down (its wraps added up), on fixture roots whose power files
the test rewrites between samples."""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.monitor.exposition import render
from halo_cluster.monitor.sampler import JOULES, WATTS, EnergyTotal, Sampler
from halo_cluster.monitor.snapshot import Key, Snapshot

ROOTS = Path(__file__).parents[1] / "fixtures" / "roots"
HWMON3 = "sys/devices/pci0000:00/0000:00:08.1/0000:c3:00.0/hwmon/hwmon3"
RAPL0 = "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0"
STRIX_RAPL = (JOULES, (("source", "intel-rapl:0/energy_uj"), ("domain", "package-0")))
STRIX_RANGE_UJ = 65_532_610_987  # the fixture's max_energy_range_uj
GPU_ENERGY = (JOULES, (("source", "hwmon3/energy1_input"), ("domain", "gpu")))
ERRORS: Key = ("halo_scrape_errors_total", ())


def power(snapshot: Snapshot) -> dict[Key, float]:
    return {k: v for k, v in snapshot.values.items() if k[0] in (WATTS, JOULES)}


def write(root: Path, rel: str, value: int | str) -> None:
    (root / rel).write_text(f"{value}\n")


def test_strix_halo_root_gives_its_gpu_watts_and_package_joules() -> None:
    sampler = Sampler(str(ROOTS / "strix-e810"))
    snapshot = sampler.sample()
    assert power(snapshot) == {
        (WATTS, (("source", "hwmon3/power1_average"), ("domain", "gpu"))): 74.0,
        (WATTS, (("source", "hwmon3/power1_input"), ("domain", "gpu"))): 61.25,
        STRIX_RAPL: 51_234.56789,
    }
    assert snapshot.errors == 0
    assert render(power(snapshot)) == (
        "# HELP halo_node_energy_joules_total Energy a counter of the node has counted "
        "(RAPL energy_uj, amdgpu energy1_input), its wraps added up so it never goes down.\n"
        "# TYPE halo_node_energy_joules_total counter\n"
        'halo_node_energy_joules_total{source="intel-rapl:0/energy_uj",domain="package-0"} '
        "51234.56789\n"
        "# HELP halo_node_power_watts Power a source of the node reports "
        "(amdgpu hwmon power1_average, power1_input).\n"
        "# TYPE halo_node_power_watts gauge\n"
        'halo_node_power_watts{source="hwmon3/power1_average",domain="gpu"} 74\n'
        'halo_node_power_watts{source="hwmon3/power1_input",domain="gpu"} 61.25\n'
    )
    sampler.close()


def test_two_package_server_gives_a_counter_per_rapl_domain() -> None:
    sampler = Sampler(str(ROOTS / "connectx-roce"))
    snapshot = sampler.sample()
    assert power(snapshot) == {
        (JOULES, (("source", "intel-rapl:0/energy_uj"), ("domain", "package-0"))): 104_857.6,
        (JOULES, (("source", "intel-rapl:0:0/energy_uj"), ("domain", "core"))): 52_428.8,
        (JOULES, (("source", "intel-rapl:1/energy_uj"), ("domain", "package-1"))): 99_614.72,
        (JOULES, (("source", "intel-rapl:2/energy_uj"), ("domain", "psys"))): 262_000.0,
    }
    assert snapshot.errors == 0
    page = render(power(snapshot)).splitlines()
    assert page[:2] == [
        "# HELP halo_node_energy_joules_total Energy a counter of the node has counted "
        "(RAPL energy_uj, amdgpu energy1_input), its wraps added up so it never goes down.",
        "# TYPE halo_node_energy_joules_total counter",
    ]
    assert page[2:] == [
        'halo_node_energy_joules_total{source="intel-rapl:0/energy_uj",domain="package-0"} 104857.6',
        'halo_node_energy_joules_total{source="intel-rapl:0:0/energy_uj",domain="core"} 52428.8',
        'halo_node_energy_joules_total{source="intel-rapl:1/energy_uj",domain="package-1"} 99614.72',
        'halo_node_energy_joules_total{source="intel-rapl:2/energy_uj",domain="psys"} 262000',
    ]
    sampler.close()


def test_a_root_without_power_sources_has_no_power_series() -> None:
    sampler = Sampler(str(ROOTS / "no-rdma"))
    page = render(sampler.sample().values)
    assert "halo_node_power_watts" not in page and "halo_node_energy_joules_total" not in page
    sampler.close()


def test_odd_content_is_no_crash() -> None:
    """Negative watts, "N/A" joules and "lots" of RAPL energy are no sources at all; the one
    good gauge is a series, and sampling again changes nothing."""
    sampler = Sampler(str(ROOTS / "odd-content"))
    for _ in range(2):
        snapshot = sampler.sample()
        assert power(snapshot) == {
            (WATTS, (("source", "hwmon1/power1_input"), ("domain", "gpu"))): 12.0,
        }
        render(snapshot.values)
    sampler.close()


def test_a_wrap_of_known_range_is_counted_once(root_copy) -> None:
    """RAPL's counter wraps at max_energy_range_uj: the exposed total goes on past it."""
    root = root_copy("strix-e810")
    sampler = Sampler(str(root))
    readings_uj = [51_234_567_890, 65_000_000_000, 1_000_000, 2_500_000, 2_500_000]
    totals = []
    for uj in readings_uj:
        write(root, f"{RAPL0}/energy_uj", uj)
        snapshot = sampler.sample()
        totals.append(snapshot.values[STRIX_RAPL])
        assert snapshot.errors == 0
    wrap_j = STRIX_RANGE_UJ / 1e6
    assert totals == pytest.approx(
        [51_234.56789, 65_000.0, 65_000.0 + (wrap_j - 65_000.0 + 1.0),
         wrap_j + 2.5, wrap_j + 2.5]
    )  # fmt: skip
    assert totals == sorted(totals)
    assert sampler.energy_restarts == 0 and sampler.scrape_errors == 0
    sampler.close()


def test_a_decrease_of_unknown_range_goes_on_from_the_new_reading(root_copy) -> None:
    """amdgpu's energy1_input gives no range: where it goes down (a driver reload), the
    total stays where it was, goes on from the new reading, and counts one error."""
    root = root_copy("strix-e810")
    write(root, f"{HWMON3}/energy1_input", 100_000_000)
    sampler = Sampler(str(root))
    readings_uj = [100_000_000, 150_000_000, 20_000_000, 30_000_000, 30_000_000]
    totals, errors = [], []
    for uj in readings_uj:
        write(root, f"{HWMON3}/energy1_input", uj)
        snapshot = sampler.sample()
        totals.append(snapshot.values[GPU_ENERGY])
        errors.append(snapshot.values[ERRORS])
    assert totals == pytest.approx([100.0, 150.0, 150.0, 160.0, 160.0])
    assert errors == [0, 0, 1, 1, 1]
    assert sampler.energy_restarts == 1
    sampler.close()


def test_rapl_without_its_range_is_a_counter_of_unknown_range(root_copy) -> None:
    root = root_copy("strix-e810")
    os.remove(root / RAPL0 / "max_energy_range_uj")
    sampler = Sampler(str(root))
    totals = []
    for uj in (51_234_567_890, 60_000_000_000, 5_000_000, 6_000_000):
        write(root, f"{RAPL0}/energy_uj", uj)
        totals.append(sampler.sample().values[STRIX_RAPL])
    assert totals == pytest.approx([51_234.56789, 60_000.0, 60_000.0, 60_001.0])
    assert sampler.energy_restarts == 1
    sampler.close()


def test_garbage_after_discovery_is_an_error_and_the_total_goes_on(root_copy) -> None:
    root = root_copy("strix-e810")
    sampler = Sampler(str(root))
    first = sampler.sample()
    write(root, f"{RAPL0}/energy_uj", "lots")
    write(root, f"{HWMON3}/power1_average", -5)
    bad = sampler.sample()
    assert bad.errors == 2
    assert power(bad) == {(WATTS, (("source", "hwmon3/power1_input"), ("domain", "gpu"))): 61.25}
    write(root, f"{RAPL0}/energy_uj", 51_244_567_890)
    write(root, f"{HWMON3}/power1_average", 80_500_000)
    good = sampler.sample()
    assert good.errors == 0
    assert good.values[STRIX_RAPL] == pytest.approx(first.values[STRIX_RAPL] + 10.0)
    assert good.values[(WATTS, (("source", "hwmon3/power1_average"), ("domain", "gpu")))] == 80.5
    sampler.close()


def test_a_vanished_gpu_drops_its_series_and_its_total_is_kept(root_copy, tmp_path: Path) -> None:
    """A driver reload: the hwmon device goes and comes back; the joules counter goes on
    from where it was, never down."""
    root = root_copy("strix-e810")
    write(root, f"{HWMON3}/energy1_input", 500_000_000)
    sampler = Sampler(str(root), rescan_s=0.0)
    before = sampler.sample()
    assert before.values[GPU_ENERGY] == 500.0
    link = root / "sys/class/hwmon/hwmon3"
    target = os.readlink(link)
    saved = tmp_path / "hwmon3"
    shutil.copytree(root / HWMON3, saved)
    link.unlink()
    shutil.rmtree(root / HWMON3)
    gone = sampler.sample()
    assert gone.vanished == ("sys/class/hwmon/hwmon3",)
    assert set(power(gone)) == {STRIX_RAPL}
    shutil.copytree(saved, root / HWMON3)
    write(root, f"{HWMON3}/energy1_input", 1_000_000)  # the driver counts from zero again
    link.symlink_to(target)
    back = sampler.sample()
    assert back.values[GPU_ENERGY] == 500.0 and back.errors == 1
    write(root, f"{HWMON3}/energy1_input", 3_000_000)
    assert sampler.sample().values[GPU_ENERGY] == pytest.approx(502.0)
    sampler.close()


@given(
    st.floats(min_value=1.0, max_value=1e6),
    st.lists(st.floats(min_value=0.0, max_value=1.0, exclude_max=True), min_size=1),
    st.booleans(),
)
def test_a_running_total_never_goes_down(
    range_j: float, fractions: list[float], known: bool
) -> None:
    """Any readings within the counter's range: the total never goes down, and with the
    range known it is the first reading plus every increase, a wrap counted once."""
    readings = [f * range_j for f in fractions]
    total = EnergyTotal(readings[0])
    expected = readings[0]
    for before, after in itertools.pairwise(readings):
        was = total.total_j
        kept = total.add(after, range_j if known else None)
        assert total.total_j >= was
        assert kept == (known or after >= before)
        expected += after - before if after >= before else (range_j - before + after)
    if known:
        assert total.total_j == pytest.approx(expected, rel=1e-9, abs=1e-6)
