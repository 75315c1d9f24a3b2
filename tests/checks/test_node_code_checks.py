"""node.python and the halo version warning, through the doctor with the fake runner: how
each node runs halo's node-side commands, one failing node among healthy ones, version skew."""

from __future__ import annotations

from dataclasses import replace

from halo_cluster import __version__
from halo_cluster.checks import Finding
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.result import Result
from tests.checks.test_cluster_checks import STRIX1, STRIX2, config, doctor, fake, node_inv
from tests.conftest import strix_peer


def node_finding(report, name: str) -> Finding:  # type: ignore[no-untyped-def]
    return next(f for f in report.nodes[name] if f.check == "node.python")


def test_node_code_and_installed_halo_are_both_named() -> None:
    healthy = node_inv("strix-e810", python="3.11.2", halo=__version__)
    installed = replace(STRIX2, halo="halo")
    peer = replace(strix_peer(healthy), versions={**healthy.versions})
    report = doctor(config(STRIX1, installed), {"strix1": fake(healthy), "strix2": fake(peer)})
    assert node_finding(report, "strix1") == Finding(
        "node.python", "ok", "Python 3.11.2 (python3) runs halo's node code (cached by hash)"
    )
    assert node_finding(report, "strix2") == Finding(
        "node.python", "ok", f"halo {__version__} installed (halo), Python 3.11.2"
    )
    assert [f.severity for f in report.cluster if f.check == "cluster.versions_match"] == ["ok"]


def test_an_installed_halo_of_another_version_is_a_warning_naming_both() -> None:
    healthy = node_inv("strix-e810", halo=__version__)
    old = replace(strix_peer(healthy), versions={**healthy.versions, "halo": "0.0.9"})
    installed = replace(STRIX2, halo="halo")
    report = doctor(config(STRIX1, installed), {"strix1": fake(healthy), "strix2": fake(old)})
    skew = [
        f for f in report.cluster if f.check == "cluster.versions_match" and f.severity == "warn"
    ]
    assert skew == [
        Finding(
            "cluster.versions_match",
            "warn",
            f"an installed halo differs from this halo {__version__}",
            ("strix2: halo 0.0.9 (halo)", f"this halo: {__version__}"),
            (
                '# remove the node\'s halo = "…" line: halo then sends its own node code',
                "# or install this halo's version there",
            ),
        )
    ]


def test_a_node_without_a_usable_python_fails_alone() -> None:
    healthy = node_inv("strix-e810")
    old = FakeRunner().on(
        ["halo", "inventory"], Result((), 98, "", "halo-node: python 3.8.10 is older than 3.9\n")
    )
    report = doctor(config(STRIX1, STRIX2), {"strix1": fake(healthy), "strix2": old})
    assert report.nodes["strix2"] == [
        Finding(
            "node.python",
            "fail",
            "strix2's Python is older than 3.9",
            ("python 3.8.10 is older than 3.9",),
            (
                "# install Python >= 3.9 on strix2 (apt install python3 / dnf install python3), "
                "in its container when it has an exec_prefix",
                '# or name one in halo.toml: python = "/usr/bin/python3.11" for strix2',
            ),
        )
    ]
    assert node_finding(report, "strix1").severity == "ok"
    assert [f.severity for f in report.cluster if f.check == "cluster.reachable"] == ["ok"]
    assert report.exit_code(strict=False) == 1
