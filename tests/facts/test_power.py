"""Power sources (facts/power.py) and the energy over a window (facts/energy.py): amdgpu's
hwmon and RAPL read from fixture roots, amd-smi's JSON, and the joules of recorded sequences,
wraps included."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.errors import ParseError
from halo_cluster.facts.energy import (
    ClusterEnergy,
    NodeEnergy,
    Sample,
    counter_increase,
    node_energy,
)
from halo_cluster.facts.model import COUNTER, GAUGE, PowerReading
from halo_cluster.facts.power import parse_amd_smi_power, read_power
from halo_cluster.facts.root import Root
from tests.conftest import FIXTURES

ROOTS = FIXTURES / "roots"
AMD_SMI = FIXTURES / "outputs" / "amd-smi"


def test_strix_halo_reads_amdgpu_and_rapl() -> None:
    assert read_power(Root(str(ROOTS / "strix-e810"))) == (
        PowerReading("hwmon3/power1_average", "amdgpu", "gpu", GAUGE, 74.0),
        PowerReading("hwmon3/power1_input", "amdgpu", "gpu", GAUGE, 61.25),
        PowerReading("intel-rapl:0/energy_uj", "rapl", "package-0", COUNTER, 51234.56789,
                     65532.610987),
    )  # fmt: skip


def test_amdgpu_energy_counter_where_the_driver_has_one() -> None:
    assert read_power(Root(str(ROOTS / "thunderbolt"))) == (
        PowerReading("hwmon2/power1_input", "amdgpu", "gpu", GAUGE, 48.5),
        PowerReading("hwmon2/energy1_input", "amdgpu", "gpu", COUNTER, 918273.645),
    )


def test_a_node_without_sources_has_none() -> None:
    root = Root(str(ROOTS / "no-rdma"))
    assert read_power(root) == () and root.warnings == []


def test_unreadable_sources_are_warnings_not_readings() -> None:
    root = Root(str(ROOTS / "odd-content"))
    assert read_power(root) == (PowerReading("hwmon1/power1_input", "amdgpu", "gpu", GAUGE, 12.0),)
    assert root.warnings == [
        "/sys/class/hwmon/hwmon1/power1_average: a negative power or energy reading "
        "(content '-5\\n')",
        "/sys/class/hwmon/hwmon1/energy1_input: not an integer (content 'N/A\\n')",
        "/sys/class/powercap/intel-rapl:0/energy_uj: not an integer (content 'lots\\n')",
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("metric-power-6.2.json", (PowerReading("amd-smi gpu 0", "amd-smi", "gpu", GAUGE, 71.0),)),
        ("metric-power-6.0.json", (PowerReading("amd-smi gpu 0", "amd-smi", "gpu", GAUGE, 38.0),)),
        ("metric-power-na.json", ()),
    ],
)
def test_amd_smi_power(name: str, expected: tuple[PowerReading, ...]) -> None:
    assert parse_amd_smi_power((AMD_SMI / name).read_text()) == expected


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
            ["gpu", "power", "socket_power", "value", "unit", "gpu_data", "x"]), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(JSON)
def test_amd_smi_anything_else_is_a_parse_error_or_finite_readings(value: object) -> None:
    try:
        found = parse_amd_smi_power(json.dumps(value))
    except ParseError as err:
        assert "\n" not in err.describe().strip()
        return
    assert all(r.value >= 0 and r.value != float("inf") for r in found)


def reading(value: float, kind: str = COUNTER, wrap: float | None = 100.0,
            source: str = "intel-rapl:1/energy_uj", domain: str = "psys") -> PowerReading:  # fmt: skip
    tool = "rapl" if source.startswith("intel-rapl") else "amdgpu"
    return PowerReading(source, tool, domain, kind, value, wrap if kind == COUNTER else None)


def test_a_counter_that_wraps_counts_once_around() -> None:
    samples = [Sample(0.0, (reading(90.0),)), Sample(1.0, (reading(98.0),)),
               Sample(2.0, (reading(6.0),)), Sample(3.0, (reading(10.0),))]  # fmt: skip
    assert node_energy("n1", samples) == NodeEnergy(
        "n1", 3.0, 20.0, "energy counter", ("intel-rapl:1/energy_uj",)
    )
    assert counter_increase(98.0, 6.0, None) is None


def test_a_wrap_with_no_range_gives_no_number() -> None:
    samples = [Sample(0.0, (reading(90.0, wrap=None),)), Sample(1.0, (reading(5.0, wrap=None),))]
    found = node_energy("n1", samples)
    assert found.joules is None and "went down" in (found.problem or "")


def test_gauges_are_integrated_and_the_best_tier_wins() -> None:
    gauge = "hwmon3/power1_average"
    samples = [
        Sample(t, (reading(w, GAUGE, source=gauge, domain="gpu"), reading(1e6 + t)))
        for t, w in ((0.0, 60.0), (1.0, 80.0), (3.0, 80.0))
    ]
    assert node_energy("n1", samples).joules == 3.0  # psys (a counter) before amdgpu's gauge
    only = [Sample(s.at_s, s.readings[:1]) for s in samples]
    found = node_energy("n1", only)
    assert (found.joules, found.method, found.watts) == (230.0, "power samples", 230.0 / 3)


def test_the_cluster_adds_measured_nodes_and_says_how_many() -> None:
    one = NodeEnergy("n1", 10.0, 700.0, "energy counter", ("a",))
    none = NodeEnergy("n2", 10.0, problem="no power source")
    energy = ClusterEnergy((one, none), tokens=350)
    assert energy.coverage == "1 of 2 nodes measured" and energy.joules_per_token == 2.0
    assert energy.line() == "energy: 700.0 J over the window, 2.000 J per output token " \
        "(1 of 2 nodes measured)"
    nothing = ClusterEnergy((none,), tokens=350)
    assert nothing.joules_per_token is None
    assert nothing.line() == "energy: no node has a power source (nothing measured)"
    assert json.loads(json.dumps(nothing.to_dict()))["joules_per_token"] is None
    silent = ClusterEnergy((none, NodeEnergy("n3", 10.0, problem="no answer: timed out")), 350)
    assert silent.line() == "energy: not measured (n3: no answer: timed out)"


@given(st.lists(st.floats(0, 1e6), min_size=2, max_size=20), st.floats(1.0, 1e7))
def test_any_counter_sequence_is_never_negative(values: list[float], wrap: float) -> None:
    samples = [Sample(float(i), (reading(v % wrap, wrap=wrap),)) for i, v in enumerate(values)]
    found = node_energy("n1", samples)
    assert found.joules is not None and found.joules >= 0
