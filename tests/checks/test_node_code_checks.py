"""node.python and the halo version warning, through the doctor with the fake runner: how
each node runs halo's node-side commands, one failing node among healthy ones, version skew."""

from __future__ import annotations

import shlex
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


def refused_report(path: str):  # type: ignore[no-untyped-def]
    line = (
        f"{path} is owned by uid 1000, not by this user (uid 0): refused; "
        "remove it or chown it to uid 0"
    )
    refused = FakeRunner().on(["halo", "inventory"], Result((), 95, "", f"halo-node: {line}\n"))
    healthy = node_inv("strix-e810")
    return line, doctor(config(STRIX1, STRIX2), {"strix1": fake(healthy), "strix2": refused})


def test_a_node_whose_cache_another_user_can_change_fails_alone_with_the_fix() -> None:
    """BOOT refused the cache (issue 29, N2 b): the doctor names the path and how to fix it."""
    line, report = refused_report("/root/.cache/halo")
    assert report.nodes["strix2"] == [
        Finding(
            "node.python",
            "fail",
            "strix2's cache of halo's node code could be changed by another user",
            (line,),
            (
                "ssh -- root@192.168.1.52 'ls -la /root/.cache/halo'",
                "# if nobody else should have put anything there: remove it, halo sends its "
                "code again",
                "ssh -- root@192.168.1.52 'rm -rf /root/.cache/halo'",
            ),
        )
    ]
    assert node_finding(report, "strix1").severity == "ok"


def test_the_refused_path_is_quoted_twice_in_the_fix() -> None:
    """A path as a node reports it stays one word, through ssh's shell too."""
    path = "/home/o'neil $(touch x)/.cache/halo"
    _line, report = refused_report(path)
    fix = node_finding(report, "strix2").fix
    commands = [shlex.split(fix[0]), shlex.split(fix[2])]
    assert [c[:3] for c in commands] == [["ssh", "--", "root@192.168.1.52"]] * 2
    assert [shlex.split(c[3]) for c in commands] == [["ls", "-la", path], ["rm", "-rf", path]]
