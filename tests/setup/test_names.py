"""The cluster's names on the fabric: halo's block of /etc/hosts (written by the names step,
replaced in place, every other line kept), what a node resolves a peer's name to (asked
for real of this machine's resolver) and the doctor's cluster.names."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from halo_cluster.checks.cluster import check_names
from halo_cluster.checks.context import NodeReport
from halo_cluster.cluster.gather import names_script, parse_names
from halo_cluster.config import NodeConfig
from halo_cluster.errors import UsageError
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.hostsfile import BEGIN, END, HOSTS_FILE, names_block, with_names
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.setup.apply import apply_steps, current_steps
from halo_cluster.setup.steps import SetupOptions
from tests.conftest import ROOTS

NAMES = (("node1", "192.168.100.1"), ("node2", "192.168.100.2"))
THEIRS = "127.0.0.1\tlocalhost\n# the admin's own\n10.0.0.5 nas\n"


def test_the_block_comes_first_and_nothing_else_changes() -> None:
    """The resolver takes the first line that names a host: the block is the file's first
    lines, so the fabric address wins over an older line for the same name."""
    added = with_names(THEIRS, dict(NAMES))
    assert added == f"{BEGIN}\n192.168.100.1\tnode1\n192.168.100.2\tnode2\n{END}\n" + THEIRS
    after = "10.0.0.7 node1-old\n" + added + "10.0.0.6 printer\n"  # lines added around it
    moved = with_names(after, {"node1": "192.168.100.9"})
    assert moved == (
        names_block({"node1": "192.168.100.9"}) + "10.0.0.7 node1-old\n" + THEIRS
        + "10.0.0.6 printer\n"
    )  # fmt: skip
    assert with_names("", {"a": "10.0.0.1"}) == names_block({"a": "10.0.0.1"})
    # a marker that is not a whole line is not ours; a BEGIN without its END is refused
    odd = f"x {BEGIN}\n1.2.3.4 other\n"
    assert with_names(odd, dict(NAMES)) == names_block(dict(NAMES)) + odd
    with pytest.raises(ValueError, match="without its '# END halo' line"):
        with_names(f"{THEIRS}{BEGIN}\n1.2.3.4 half\n", dict(NAMES))


def test_a_hosts_file_halo_cannot_read_whole_or_a_cut_block_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "rxe-virtio", root, symlinks=True)
    opts = SetupOptions(home="root", names=NAMES)
    (root / HOSTS_FILE).write_text(THEIRS + BEGIN + "\n")
    cut = next(s for s in current_steps(str(root), opts) if s.id == "names")
    assert (cut.done, cut.actions) == (False, ())
    assert "mend or remove that line by hand" in cut.note
    (root / HOSTS_FILE).unlink()
    (root / HOSTS_FILE).mkdir()  # there, but not a file
    odd = next(s for s in current_steps(str(root), opts) if s.id == "names")
    assert (odd.done, odd.actions) == (False, ())
    assert odd.note.startswith("/etc/hosts could not be read whole: not changed")


def test_the_names_step_writes_the_block_once(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "rxe-virtio", root, symlinks=True)
    (root / HOSTS_FILE).write_text(THEIRS)
    opts = SetupOptions(home="root", names=NAMES)
    step = next(s for s in current_steps(str(root), opts) if s.id == "names")
    assert not step.done and step.check == "cluster.names"
    assert step.note == "node1 192.168.100.1, node2 192.168.100.2"
    outcomes = apply_steps(str(root), opts, FakeRunner(), only={"names"})
    assert outcomes[0].changed
    assert (root / HOSTS_FILE).read_text() == with_names(THEIRS, dict(NAMES))
    assert next(s for s in current_steps(str(root), opts) if s.id == "names").done
    # without names (no cluster config), there is no such step
    plain = current_steps(str(root), SetupOptions(home="root"))
    assert "names" not in [s.id for s in plain]


@pytest.mark.parametrize(
    "given, why",
    [
        (("node 1", "192.168.100.1"), "has a name that is not a node's"),
        (("node1", "0.0.0.0"), "is 0.0.0.0"),
        (("node1", "example.org"), "is not an IPv4 address"),
        (("-x", "192.168.100.1"), "has a name that is not a node's"),
    ],
)
def test_a_name_or_address_that_is_not_one_is_one_line(given: tuple[str, str], why: str) -> None:
    with pytest.raises(UsageError, match=f"--name .* {why}"):
        SetupOptions(names=(given,))


def test_what_a_name_resolves_to_is_asked_of_the_real_resolver() -> None:
    """localhost resolves here; a name under .invalid never does (RFC 6761)."""
    said = subprocess.run(
        ["bash", "-s"], input=names_script(["localhost", "no-such-node.invalid"]),
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    text = said.partition("--- names\n")[2]
    assert parse_names(text, ["localhost", "no-such-node.invalid", "unasked"]) == {
        "localhost": "127.0.0.1",
        "no-such-node.invalid": None,
        "unasked": None,
    }
    assert parse_names("node2=not-an-address\nnode2\n", ["node2"]) == {"node2": None}


def _report(name: str, address: str, names: dict[str, str | None]) -> NodeReport:
    node = NodeConfig(name, f"root@{name}", address)
    inventory = collect_inventory(str(ROOTS / "rxe-virtio"))
    return NodeReport(node, inventory, names=names)


def test_the_doctor_names_each_node_that_resolves_a_peer_elsewhere() -> None:
    good = [
        _report("node1", "192.168.100.1", {"node2": "192.168.100.2"}),
        _report("node2", "192.168.100.2", {"node1": "192.168.100.1"}),
    ]
    found = check_names(good)
    assert (found.severity, found.summary) == (
        "ok",
        "all 2 node names resolve to their fabric address",
    )
    bad = [
        _report("node1", "192.168.100.1", {"node2": "10.0.0.2"}),
        _report("node2", "192.168.100.2", {"node1": None}),
    ]
    found = check_names(bad)
    assert found.severity == "warn"
    assert found.summary == "2 of 2 node names do not resolve to the fabric address"
    assert found.evidence == (
        "node1: node2 -> 10.0.0.2 (fabric 192.168.100.2)",
        "node2: node1 -> not resolved (fabric 192.168.100.1)",
    )
    assert found.fix[0].startswith("halo setup --step names --apply")
    assert check_names([_report("node1", "192.168.100.1", {})]).severity == "info"
