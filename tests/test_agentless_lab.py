"""Bare lab nodes (halo's environment hidden from them) for real: halo's node code sent over
SSH to each node's Python and cached by hash; a real Python 3.9; one finding per node for a
missing or too-old Python, an unwritable cache or garbage output, the others still checked;
a corrupted cache replaced and never run; the exporter deployed as a unit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from halo_cluster.nodecode import node_code
from tests.conftest import python39
from tests.test_lab import halo, lab_exec, ssh, workdir  # noqa: F401 (fixture)

pytestmark = pytest.mark.lab


def up(workdir: Path, name: str, nodes: int = 2) -> Path:  # noqa: F811
    halo(
        "lab",
        "up",
        "--name",
        name,
        "--nodes",
        str(nodes),
        "--no-engine",
        "--no-llama-cpp",
        cwd=workdir,
    )
    return workdir / ".halo-lab" / name


def with_node_lines(config: Path, node: str, lines: str) -> None:
    """Add ``lines`` to [[node]] ``node`` of a lab's halo.toml."""
    text = config.read_text()
    marker = f'name = "{node}"\n'
    assert marker in text
    config.write_text(text.replace(marker, marker + lines, 1))


def doctor(workdir: Path, lab: Path) -> tuple[int, dict]:  # noqa: F811
    done = halo("doctor", "--config", str(lab / "halo.toml"), "--json", cwd=workdir, check=False)
    assert "Traceback" not in done.stderr
    return done.returncode, json.loads(done.stdout)


def finding(report: dict, node: str, check: str) -> dict:
    return next(f for f in report["nodes"][node]["findings"] if f["check"] == check)


def cached_code(lab: Path, node: str) -> Path:
    return lab / "home" / node / ".cache" / "halo" / f"node-{node_code().digest}.pyz"


def test_bare_nodes_get_the_code_once_and_keep_it(workdir: Path) -> None:  # noqa: F811
    lab = up(workdir, "ag")
    # halo's own environment is not there: only the system's Python
    assert lab_exec(workdir, "ag", "node1", f"{sys.prefix}/bin/halo", "--version").returncode != 0
    code, first = doctor(workdir, lab)
    assert code == 0, first
    for node in ("node1", "node2"):
        ok = finding(first, node, "node.python")
        assert ok["severity"] == "ok" and "sent now" in ok["summary"], ok
        path = cached_code(lab, node)
        assert path.read_bytes() == node_code().data
        assert path.stat().st_mode & 0o777 == 0o600
    _, second = doctor(workdir, lab)
    assert "(cached by hash)" in finding(second, "node1", "node.python")["summary"]


def test_a_corrupted_cache_is_replaced_never_run(workdir: Path, tmp_path: Path) -> None:  # noqa: F811
    lab = up(workdir, "ac")
    assert doctor(workdir, lab)[0] == 0
    marker = lab / "home" / "node1" / "ran"
    path = cached_code(lab, "node1")
    import io
    import zipfile

    evil = io.BytesIO()  # a zipapp that would leave a marker if anything imported it
    with zipfile.ZipFile(evil, "w") as archive:
        payload = f"open({str(marker)!r}, 'w').write('ran')\n"
        archive.writestr("halo_cluster/__init__.py", payload)
        archive.writestr("halo_cluster/node/__init__.py", payload)
        archive.writestr("halo_cluster/node/main.py", payload + "def main():\n    return 0\n")
    path.write_bytes(evil.getvalue())
    code, report = doctor(workdir, lab)
    assert code == 0, report
    assert not marker.exists()
    assert path.read_bytes() == node_code().data
    assert "sent now" in finding(report, "node1", "node.python")["summary"]

    # the cache directory given to another user (issue 29, N2 b): refused, nothing run
    import os

    os.chown(path.parent, 12345, 12345)
    code, report = doctor(workdir, lab)
    refused = finding(report, "node1", "node.python")
    line = (
        f"{path.parent} is owned by uid 12345, not by this user (uid 0): refused; "
        "remove it or chown it to uid 0"
    )
    assert (code, refused["severity"], refused["evidence"]) == (1, "fail", [line]), refused
    assert (
        refused["summary"] == "node1's cache of halo's node code could be changed by another user"
    )
    assert finding(report, "node2", "node.python")["severity"] == "ok"
    os.chown(path.parent, 0, 0)
    assert doctor(workdir, lab)[0] == 0


def test_one_finding_per_node_and_the_others_proceed(workdir: Path) -> None:  # noqa: F811
    lab = up(workdir, "ap", nodes=4)
    config = lab / "halo.toml"
    # node1: a real Python 3.9; node2: none; node3: a Python that says it is 3.8.10
    with_node_lines(config, "node1", f'python = "{python39()}"\n')
    with_node_lines(config, "node2", 'python = "/nonexistent/python3"\n')
    old = lab / "old-python"
    (old / "site").mkdir(parents=True)
    (old / "site" / "sitecustomize.py").write_text(
        "import sys\nsys.version_info = (3, 8, 10, 'final', 0)\n"
    )
    (old / "python3").write_text(f'#!/bin/sh\nPYTHONPATH={old / "site"} exec python3 "$@"\n')
    (old / "python3").chmod(0o755)
    with_node_lines(config, "node3", f'python = "{old / "python3"}"\n')
    code, report = doctor(workdir, lab)
    assert code == 1
    assert "Python 3.9.2" in finding(report, "node1", "node.python")["summary"]
    missing = finding(report, "node2", "node.python")
    assert missing["severity"] == "fail" and "has no Python" in missing["summary"], missing
    assert "/nonexistent/python3" in " ".join(missing["evidence"])
    too_old = finding(report, "node3", "node.python")
    assert too_old["severity"] == "fail", too_old
    assert too_old["evidence"] == ["python 3.8.10 is older than 3.9"]
    assert finding(report, "node4", "node.python")["severity"] == "ok"
    assert len(report["nodes"]["node4"]["findings"]) > 5  # the healthy node was fully checked
    reachable = [f for f in report["cluster"]["findings"] if f["check"] == "cluster.reachable"]
    assert [f["severity"] for f in reachable] == ["ok"]  # they answered: not unreachable


def test_an_unwritable_cache_and_garbage_output(workdir: Path) -> None:  # noqa: F811
    lab = up(workdir, "aw", nodes=3)
    home = lab / "home" / "node1"
    # a read-only cache directory inside node1 only (its own mount namespace)
    assert lab_exec(workdir, "aw", "node1", "mkdir", "-p", f"{home}/.cache").returncode == 0
    mount = ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", f"{home}/.cache"]
    assert lab_exec(workdir, "aw", "node1", *mount).returncode == 0
    with_node_lines(lab / "halo.toml", "node2", 'python = "/bin/echo"\n')  # prints, exits 0
    code, report = doctor(workdir, lab)
    assert code == 1
    cache = finding(report, "node1", "node.python")
    assert cache["severity"] == "fail" and "cannot cache" in cache["summary"], cache
    assert "Read-only file system" in cache["evidence"][0]
    unreadable = [
        f
        for f in report["cluster"]["findings"]
        if f["check"] == "cluster.reachable" and f["severity"] == "fail"
    ]
    assert [f["summary"] for f in unreadable] == ["node2 did not answer"]
    assert "unreadable inventory from /bin/echo" in unreadable[0]["evidence"][0]
    assert "got '-c import sys\\nif sys.version_info" in unreadable[0]["evidence"][0]
    assert finding(report, "node3", "node.python")["severity"] == "ok"


def test_the_exporter_unit_runs_on_a_bare_node(workdir: Path) -> None:  # noqa: F811
    lab = up(workdir, "ae")
    config = str(lab / "halo.toml")
    done = halo(
        "monitoring",
        "exporter-unit",
        "--config",
        config,
        "--install",
        "--listen",
        "mgmt",
        "--json",
        cwd=workdir,
    )
    units = json.loads(done.stdout)["nodes"]
    assert {n: (u["installed"], u["started"]) for n, u in units.items()} == {
        "node1": (True, False),  # no systemd in a lab node
        "node2": (True, False),
    }
    from halo_cluster.runner.daemon import exec_start

    argv = exec_start(units["node1"]["unit"])
    assert argv == units["node1"]["argv"]
    shown = lab_exec(workdir, "ae", "node1", *argv[:4], "--once", "--root", "/")
    assert shown.returncode == 0, shown.stderr
    assert '\nhalo_net_mtu_bytes{interface="eno1"} 1500\n' in shown.stdout
    # the code on the node is checked against its name: a changed copy does not run
    path = units["node1"]["code"]
    assert ssh(workdir, "ae", "node1", "sh", "-c", f"echo x >> {path}").returncode == 0
    broken = lab_exec(workdir, "ae", "node1", *argv[:4], "--once")
    assert broken.returncode == 97 and "does not match its hash" in broken.stderr
