"""The node boundary is enforced by lint-imports (pyproject.toml): the node side may not import
the controller's own layers, the wire imports nothing above the bottom layer, and the
controller may import the wire (not the rest of the node side)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.test_architecture import REPO, _lint

PLANTED = {
    # allowed: the controller builds argv with the wire
    "cluster/gather.py": "from halo_cluster.wire import inventory_args",
    # the node side reaching into the controller
    "node/handlers.py": "from halo_cluster.cluster import gather",
    # the wire reaching up
    "wire/answers.py": "from halo_cluster import transport",
    # the controller reaching past the wire into the node side
    "cluster/doctor.py": "from halo_cluster.node import main",
}


def test_lint_imports_keeps_the_node_boundary(tmp_path: Path) -> None:
    package = tmp_path / "src" / "halo_cluster"
    shutil.copytree(
        REPO / "src" / "halo_cluster", package, ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    for module, line in PLANTED.items():
        path = package / module
        path.write_text(path.read_text() + f"\n{line}  # planted\n")
    out = _lint(tmp_path).stdout
    broken = set(re.findall(r"^(.+) BROKEN", out, re.MULTILINE))
    assert broken == {
        "Layers only point down",
        "Services do not use each other (only bench drives the cluster)",  # through node.main
        "Node side: standard library only, none of the controller's own layers",
        "The wire imports nothing above the bottom layer (both sides import it)",
    }, out
    chains = set(re.findall(r"(halo_cluster\.[\w.]+ -> halo_cluster\.[\w.]+) \(l\.", out))
    assert {
        "halo_cluster.cluster.doctor -> halo_cluster.node.main",
        "halo_cluster.node.handlers -> halo_cluster.cluster.gather",
        "halo_cluster.wire.answers -> halo_cluster.transport",
    } <= chains
    assert not any(chain.endswith("-> halo_cluster.wire") for chain in chains)
