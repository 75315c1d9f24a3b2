"""halo's block of ``/etc/hosts``: the cluster's names on the fabric, between two marker
lines, mapping each node's name in halo.toml to its fabric address (an engine's bootstrap
that resolves a peer's name then reaches it over the fabric, and one that cannot resolve it
does not hang on it). The block is the file's first lines: the resolver takes the first line
that names a host, so the fabric address wins over an older line for the same name. Lines
outside the block are never changed; taking the block out leaves the file as it was. A
BEGIN line without its END (a block cut by hand) is not guessed at: the file is left to its
owner. Written by ``halo setup`` (its names step) and by the lab for its nodes. Pure; runs
on nodes (Python 3.9)."""

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
    """(before, the block or None, after): the first block from BEGIN to its END; a BEGIN
    line without an END after it is a ValueError (the file is left to its owner)."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.rstrip("\n") == BEGIN]
    if not starts:
        return text, None, ""
    first = starts[0]
    ends = [i for i in range(first + 1, len(lines)) if lines[i].rstrip("\n") == END]
    if not ends:
        raise ValueError(f"a '{BEGIN[:20]}…' line without its '{END}' line")
    stop = ends[0] + 1
    block = "".join(lines[first:stop])
    if not block.endswith("\n"):
        block += "\n"
    return "".join(lines[:first]), block, "".join(lines[stop:])


def with_names(text: str, names: Mapping[str, str]) -> str:
    """``text`` (the hosts file) with halo's block for ``names`` as its first lines (an old
    block taken out of wherever it was); a ValueError as ``split`` says."""
    before, _block, after = split(text)
    rest = before + after
    return names_block(names) + rest
