"""halo's block of ``/etc/hosts``: the cluster's names on the fabric, between two marker
lines, mapping each node's name in halo.toml to its fabric address (an engine's bootstrap
that resolves a peer's name then reaches it over the fabric, and one that cannot resolve it
does not hang on it). Lines outside the block are never changed; taking the block out
leaves the file as it was. Written by ``halo setup`` (its names step) and by the lab for its
nodes. Pure; runs on nodes (Python 3.9)."""

from __future__ import annotations

from collections.abc import Mapping

HOSTS_FILE = "etc/hosts"
BEGIN = "# BEGIN halo: the cluster's names on the fabric (halo setup; remove the block to undo)"
END = "# END halo"


def names_block(names: Mapping[str, str]) -> str:
    """The block for ``names`` (node name -> fabric address), in the nodes' order."""
    lines = [f"{address}\t{name}" for name, address in names.items()]
    return "\n".join([BEGIN, *lines, END]) + "\n"


def split(text: str) -> tuple[str, str | None, str]:
    """(before, the block or None, after): the first block from BEGIN to its END."""
    if text.startswith(BEGIN + "\n"):
        start = 0
    else:
        found = text.find("\n" + BEGIN + "\n")
        if found < 0:
            return text, None, ""
        start = found + 1
    end = text.find("\n" + END + "\n", start)
    if end < 0:
        return text, None, ""
    stop = end + len(END) + 2
    return text[:start], text[start:stop], text[stop:]


def with_names(text: str, names: Mapping[str, str]) -> str:
    """``text`` (the hosts file) with halo's block for ``names``: the old block replaced in
    its place, else the block added at the end."""
    before, block, after = split(text)
    if block is not None:
        return before + names_block(names) + after
    joint = "" if not text or text.endswith("\n") else "\n"
    return text + joint + names_block(names)
