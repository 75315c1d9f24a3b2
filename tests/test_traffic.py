"""The counters witness: bytes per token per path from two readings, the check of which path
carried the tensor-parallel traffic, and the node-side reader on fixture roots."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.facts.counters import read_paths
from halo_cluster.facts.model import PathCounters
from halo_cluster.facts.root import Root
from halo_cluster.witness.traffic import check_paths, per_token
from tests.conftest import ROOTS


def test_bytes_per_token_per_path() -> None:
    before = {
        "fabric": PathCounters("enp194s0np0", 1000, 2000),
        "mgmt": PathCounters("eno1", 10, 10),
        "rdma": PathCounters("rocep194s0/1", None, 5),
    }
    after = {
        "fabric": PathCounters("enp194s0np0", 1000 + 64 * 24000, 2000 + 64 * 24000),
        "mgmt": PathCounters("eno1", 74, 10),
        "rdma": PathCounters("rocep194s0/1", 7, 5),
    }
    assert per_token(before, after, 64) == {
        "fabric": {
            "name": "enp194s0np0",
            "rx_bytes": 1_536_000,
            "tx_bytes": 1_536_000,
            "bytes_per_token": 48000.0,
        },
        "mgmt": {"name": "eno1", "rx_bytes": 64, "tx_bytes": 0, "bytes_per_token": 1.0},
        "rdma": {"name": "rocep194s0/1", "rx_bytes": None, "tx_bytes": 0, "bytes_per_token": None},
    }


def test_a_counter_going_backwards_is_unknown_never_negative() -> None:
    out = per_token({"fabric": PathCounters("a", 10, 10)}, {"fabric": PathCounters("a", 5, 20)}, 1)
    assert out == {
        "fabric": {"name": "a", "rx_bytes": None, "tx_bytes": 10, "bytes_per_token": None}
    }


def entry(name: str, bpt: float | None) -> dict[str, object]:
    return {"name": name, "bytes_per_token": bpt}


def test_path_checks() -> None:
    good = {"node1": {"fabric": entry("f", 48000), "mgmt": entry("m", 100)}}
    assert check_paths(good, rdma_planned=False) == []
    wrong = {"node2": {"fabric": entry("f", 5000), "mgmt": entry("m", 48000)}}
    assert check_paths(wrong, rdma_planned=False) == [
        "node2: the management interface carried 48000 B/token, more than the fabric's 5000: "
        "the tensor-parallel traffic took the wrong interface"
    ]
    one_nic = {"node1": {"fabric": entry("f", 48000), "mgmt": entry("f", 48000)}}
    assert check_paths(one_nic, rdma_planned=False) == []
    rdma_ok = {"n": {"fabric": entry("f", 300), "rdma": entry("r/1", 48000)}}
    assert check_paths(rdma_ok, rdma_planned=True) == []
    rdma_bad = {"n": {"fabric": entry("f", 48000), "rdma": entry("r/1", 0)}}
    assert check_paths(rdma_bad, rdma_planned=True) == [
        "n: the RDMA port carried 0 B/token, the fabric's TCP 48000.0 B/token: the traffic "
        "did not use RDMA"
    ]
    assert check_paths({"n": {}}, rdma_planned=True) == [
        "n: the RDMA port's counters could not be read"
    ]
    assert check_paths({"n": {}}, rdma_planned=False) == [
        "n: the fabric interface's counters could not be read"
    ]


counters = st.one_of(st.none(), st.integers(0, 2**64))


@given(counters, counters, counters, counters, st.integers(-5, 10**6))
def test_never_negative(a: int | None, b: int | None, c: int | None, d: int | None, n: int) -> None:
    out = per_token({"fabric": PathCounters("x", a, b)}, {"fabric": PathCounters("x", c, d)}, n)
    values = [v for v in out["fabric"].values() if isinstance(v, int | float)]
    assert all(v >= 0 for v in values)


def test_node_side_reader_on_a_fixture_root(root_copy) -> None:  # type: ignore[no-untyped-def]
    path = root_copy("strix-e810")
    for iface, rx, tx in (("enp194s0np0", "123456789\n", "987654321\n"), ("enp191s0", "5\n", "x")):
        stats = path / "sys/class/net" / iface / "statistics"
        stats.mkdir(parents=True, exist_ok=True)
        (stats / "rx_bytes").write_text(rx)
        (stats / "tx_bytes").write_text(tx)
    root = Root(str(path))
    paths = read_paths(root, "192.168.100.1", "192.168.1.51", ("rocep194s0", 1))
    assert set(paths) == {"fabric", "mgmt", "rdma"}
    assert paths["fabric"] == PathCounters("enp194s0np0", 123456789, 987654321)
    assert paths["mgmt"] == PathCounters("enp191s0", 5, None)  # garbage: a warning, not a crash
    assert root.warnings == [
        "/sys/class/net/enp191s0/statistics/tx_bytes: not an integer (content 'x')"
    ]
    assert paths["rdma"].name == "rocep194s0/1"
    assert isinstance(paths["rdma"].rx_bytes, int) and isinstance(paths["rdma"].tx_bytes, int)
    nowhere = Root(str(ROOTS / "strix-e810"))
    assert read_paths(nowhere, "10.9.9.9", None, ("mlx5_9", 1)) == {}
    assert nowhere.warnings == ["no interface holds 10.9.9.9 (fabric)", "no RDMA port mlx5_9/1"]


def test_counters_command_prints_json(tmp_path: Path) -> None:
    from tests.conftest import halo

    done = halo("counters", "--root", str(ROOTS / "strix-e810"), "--fabric", "192.168.100.1")
    assert done.returncode == 0
    import json

    data = json.loads(done.stdout)
    assert list(data["paths"]) == ["fabric"] and data["paths"]["fabric"]["name"] == "enp194s0np0"
