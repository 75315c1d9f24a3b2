"""The names step of ``halo setup``: halo's block of ``/etc/hosts`` (``hostsfile``) with every
node's name in halo.toml and its fabric address, read from the node's root. Runs on nodes
(Python 3.9)."""

from __future__ import annotations

from collections.abc import Mapping

from halo_cluster.facts.root import Root
from halo_cluster.hostsfile import HOSTS_FILE, names_block, split, with_names
from halo_cluster.setup.step import Action, Step


def names_step(root: Root, names: Mapping[str, str]) -> Step:
    """The step that writes the block: done when the file holds it as it should be."""
    text = root.read(HOSTS_FILE, quiet=True) or ""
    _before, block, _after = split(text)
    wanted = names_block(names)
    done = block == wanted
    listed = ", ".join(f"{name} {address}" for name, address in names.items())
    return Step(
        "names",
        "the cluster's names on the fabric (/etc/hosts)",
        done,
        () if done else (Action(path=HOSTS_FILE, content=with_names(text, names), shown=wanted),),
        check="cluster.names",
        note=listed,
    )
