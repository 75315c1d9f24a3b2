"""The names step of ``halo setup``: halo's block of ``/etc/hosts`` (``hostsfile``) with every
node's name in halo.toml and its fabric address, read from the node's root. Runs on nodes
(Python 3.9)."""

from __future__ import annotations

from collections.abc import Mapping

from halo_cluster.facts.root import Root
from halo_cluster.hostsfile import HOSTS_FILE, names_block, with_names
from halo_cluster.setup.step import Action, Step


def names_step(root: Root, names: Mapping[str, str]) -> Step:
    """The step that writes the block: done when the file starts with it as it should be.
    A file that is there but cannot be read whole (too large, not a file) or holds a block
    cut by hand is never rewritten: the step says so and does nothing."""
    title = "the cluster's names on the fabric (/etc/hosts)"
    listed = ", ".join(f"{name} {address}" for name, address in names.items())
    text = root.read(HOSTS_FILE, quiet=True)
    if text is None and root.exists(HOSTS_FILE):
        why = "/etc/hosts could not be read whole: not changed; add the names by hand"
        return Step("names", title, False, check="cluster.names", note=f"{why}: {listed}")
    wanted = names_block(names)
    try:
        content = with_names(text or "", names)
    except ValueError as err:
        why = f"/etc/hosts holds {err}: not changed; mend or remove that line by hand"
        return Step("names", title, False, check="cluster.names", note=why)
    done = (text or "").startswith(wanted)
    return Step(
        "names",
        title,
        done,
        () if done else (Action(path=HOSTS_FILE, content=content, shown=wanted),),
        check="cluster.names",
        note=listed,
    )
