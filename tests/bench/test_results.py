"""Result files (list, show, resolve, bad files) and the HTML report (complete, escaped,
self-contained)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from halo_cluster.bench import results
from halo_cluster.errors import UsageError
from halo_cluster.report import render

HALO = str(Path(sys.executable).parent / "halo")
NODES = {
    "node1": {
        "hostname": "strix1",
        "transport": "roce",
        "hca": "rocep194s0:1",
        "gid_index": 1,
        "socket_ifname": "enp194s0np0",
        "mtu": 9000,
        "fabric_address": "192.168.100.1",
        "mgmt_address": "192.168.1.51",
        "versions": {"halo": "0.1.0", "torch": "2.8.0"},
    }
}


def net_result() -> dict[str, Any]:
    path = {
        "node": "node1",
        "peer": "node2",
        "transport": "tcp",
        "errors": [],
        "pct_line_rate": 55.0,
        "pct_pcie": 99.0,
    }
    return {
        "schema": "halo.bench.net/1",
        "kind": "net",
        "created": "2026-11-30T08:00:00+00:00",
        "paths": [
            {
                **path,
                "path": "mgmt",
                "latency_us": {"p50": 68.0, "p99": 90.0, "tool": "sockperf"},
                "bandwidth_gbps": 4.7,
                "bandwidth_tool": "iperf3",
            },
            {
                **path,
                "path": "rdma",
                "transport": "rdma",
                "latency_us": {"p50": 5.2, "p99": 6.0, "tool": "perftest"},
                "bandwidth_gbps": 50.6,
                "bandwidth_tool": "perftest",
            },
        ],
        "skipped": [],
        "nodes": NODES,
    }


def collective_result() -> dict[str, Any]:
    sweep = [
        {"bytes": 8 << i, "time_us": 20.0 + i, "algbw_gbs": 0.1 * i, "busbw_gbs": 0.1 * i}
        for i in range(10)
    ]
    return {
        "schema": "halo.bench.collective/1",
        "kind": "collective",
        "created": "2026-11-30T08:01:00+00:00",
        "backend": "nccl",
        "world_size": 2,
        "sweep": sweep,
        "fit": {"alpha_us": 5.0, "beta_gbps": 50.0, "max_rel_error": 0.05},
        "transport": {"backend": "nccl", "transport": "roce"},
        "nodes": NODES,
    }


def tp_result() -> dict[str, Any]:
    return {
        "schema": "halo.bench.tp/1",
        "kind": "tp",
        "created": "2026-11-30T08:02:00+00:00",
        "model": {"id": "llama-3.3-70b", "name": "Llama <3.3> 70B", "layers": 80, "hidden": 8192},
        "rows": [
            {
                "batch": 1,
                "allreduces_per_token": 162,
                "bytes_per_allreduce": 16384,
                "network_ms_per_token": 2.1,
                "tokens_per_s_ceiling": 476.0,
            },
        ],
        "nodes": NODES,
    }


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    for stamp, (name, data) in enumerate(
        (("net-1", net_result()), ("collective-1", collective_result()), ("tp-1", tp_result()))
    ):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data))
        os.utime(path, (1_700_000_000 + stamp, 1_700_000_000 + stamp))
    (tmp_path / "broken.json").write_text("{nope")
    (tmp_path / "other.json").write_text(json.dumps({"schema": "halo.inventory/1"}))
    for stamp, name in enumerate(("broken", "other")):
        os.utime(tmp_path / f"{name}.json", (1_600_000_000 + stamp, 1_600_000_000 + stamp))
    return tmp_path


def test_listing_summarises_and_keeps_unreadable_files_visible(stored: Path) -> None:
    rows = {r["id"]: r for r in results.listing(stored)}
    assert rows["net-1"]["summary"] == "mgmt 68.0 µs 4.7 Gb/s; rdma 5.2 µs 50.6 Gb/s"
    assert rows["collective-1"]["summary"] == (
        "2 ranks nccl (roce), 8..4096 B, α 5.0 µs β 50.0 Gb/s"
    )
    assert rows["tp-1"]["summary"] == "llama-3.3-70b: b1 2.10 ms"
    assert rows["broken"]["error"].startswith("not JSON")
    assert rows["other"]["error"] == "not a halo benchmark result (no halo.bench.* schema)"


def test_resolve(stored: Path) -> None:
    assert results.resolve("net-1", stored).name == "net-1.json"
    assert results.resolve("coll", stored).name == "collective-1.json"
    assert results.resolve(str(stored / "tp-1.json"), stored).name == "tp-1.json"
    assert results.resolve("latest:net", stored).name == "net-1.json"
    with pytest.raises(UsageError, match="no result 'zzz'"):
        results.resolve("zzz", stored)
    (stored / "net-2.json").write_text(json.dumps(net_result()))
    with pytest.raises(UsageError, match="matches 2 results"):
        results.resolve("net", stored)
    with pytest.raises(UsageError, match="no serve results"):
        results.resolve("latest:serve", stored)


def test_save_is_atomic_and_named_by_kind(tmp_path: Path) -> None:
    saved = results.save({"schema": "halo.bench.net/1"}, None, tmp_path / "r", "net")
    assert saved.name.startswith("net-") and json.loads(saved.read_text())["schema"]
    assert [p.name for p in (tmp_path / "r").iterdir()] == [saved.name]


def test_report_has_every_chart_escapes_and_fetches_nothing() -> None:
    page = render([net_result(), collective_result(), tp_result()], title="lab <run>")
    charts = re.findall(r'data-chart="([^"]+)"', page)
    assert charts == [
        "net-latency",
        "net-bandwidth",
        "allreduce-time",
        "allreduce-busbw",
        "tp-per-token",
    ]
    assert "<title>lab &lt;run&gt;</title>" in page and "<run>" not in page
    assert "Llama <3.3>" not in page
    assert not re.search(r"(src|href)=\"?https?:", page) and "<script" not in page
    assert page.count('<rect class="bar"') == 2 + 2 + 1
    assert "rocep194s0:1" in page and "5.2" in page


def test_cli_list_show_report(stored: Path, tmp_path: Path) -> None:
    def halo(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [HALO, *args], capture_output=True, text=True, check=False, timeout=60
        )

    listed = json.loads(halo("results", "list", "--dir", str(stored), "--json").stdout)
    assert [(r["id"], r.get("kind")) for r in listed] == [
        ("broken", None),
        ("other", None),
        ("net-1", "net"),
        ("collective-1", "collective"),
        ("tp-1", "tp"),
    ]
    shown = halo("results", "show", "tp-1", "--dir", str(stored))
    assert shown.returncode == 0 and "162" in shown.stdout
    out = tmp_path / "out" / "r.html"
    made = halo("report", "net-1", "collective-1", "tp-1", "--dir", str(stored), "-o", str(out))
    assert made.returncode == 0 and out.read_text().count("data-chart=") == 5
    missing = halo("report", "nothing-here", "--dir", str(stored), "-o", str(out))
    assert missing.returncode != 0 and "no result 'nothing-here'" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_bad_result_files_are_one_line_errors(tmp_path: Path) -> None:
    from halo_cluster.bench.results import load, write_file
    from halo_cluster.errors import UsageError

    cases = {
        "future.json": ('{"schema": "halo.bench.net/999"}', "is not one this halo reads"),
        "nan.json": ('{"schema": "halo.bench.net/1", "x": NaN}', "not JSON"),
        "kind.json": ('{"schema": "halo.bench.weather/1"}', "not a kind of result"),
        "list.json": ("[1, 2]", "no halo.bench.* schema"),
        "deep.json": ("[" * 100_000 + "]" * 100_000, "not JSON"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(UsageError) as err:
            load(tmp_path / name)
        assert message in str(err.value) and "\n" not in str(err.value), name
    with pytest.raises(UsageError, match="not a regular file"):
        load(tmp_path)
    with pytest.raises(UsageError, match="not a regular file; give the path of a file"):
        write_file(Path("/dev/null"), "never")
    write_file(tmp_path / "r.html", "<p>ok</p>")
    assert (tmp_path / "r.html").stat().st_mode & 0o777 == 0o644


def test_report_survives_results_of_the_wrong_shape(tmp_path: Path) -> None:
    from tests.conftest import halo

    shapes = [
        '"paths": 7',
        '"paths": [7]',
        '"sweep": [{"bytes": "x"}]',
        '"rows": [{"batch": null}]',
    ]
    for index, body in enumerate(shapes):
        for kind in ("net", "collective", "tp", "serve"):
            bad = tmp_path / f"{kind}{index}.json"
            bad.write_text(f'{{"schema": "halo.bench.{kind}/1", {body}}}')
            done = halo("report", str(bad), "-o", str(tmp_path / "r.html"))
            assert "Traceback" not in done.stderr and done.returncode in (0, 2), (kind, body)
    refused = halo("report", str(bad), "-o", "/dev/stdout")
    assert refused.returncode == 2 and "not a regular file" in refused.stderr


def test_report_by_deployment_takes_every_result_of_that_name(tmp_path: Path) -> None:
    """halo report --name: the results 'halo bench serve --name' stamped with that
    deployment, oldest first, beside any RESULT given; none is one line."""
    from halo_cluster.bench.results import save, stamp

    def serve(deployment: str | None) -> Path:
        levels = [{"concurrency": 1, "requests": 1, "errors": 0, "energy": None}]
        body: dict[str, object] = {
            "schema": "halo.bench.serve/1",
            "kind": "serve",
            "levels": levels,
        }
        if deployment:
            body["deployment"] = {"name": deployment, "replica": 0}
        return save({**body, **stamp(body, None)}, None, tmp_path, "serve")

    small, other, again = serve("small"), serve(None), serve("small")

    def halo(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([HALO, "report", *args, "--dir", str(tmp_path), "--json",
                               "-o", str(tmp_path / "r.html")],
                              capture_output=True, text=True, check=False, timeout=60)  # fmt: skip

    made = halo("--name", "small")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["results"] == [str(small), str(again)]
    both = json.loads(halo(other.stem, "--name", "small").stdout)["results"]
    assert both == [str(other), str(small), str(again)]
    none = halo("--name", "big")
    assert none.returncode == 2 and none.stderr.strip().endswith(
        f"no result of deployment 'big' in {tmp_path} ('halo bench serve --name big' writes one)"
    )
    bare = halo()
    assert bare.returncode == 2 and "give RESULT files or ids, or --name DEPLOYMENT" in bare.stderr
