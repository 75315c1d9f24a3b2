"""Editing the kernel command line in ``/etc/default/grub`` (pure: text in, text out)."""

from __future__ import annotations

import re
import shlex

from halo_cluster.errors import ParseError

_LINE = re.compile(
    r'^(?P<key>GRUB_CMDLINE_LINUX(?:_DEFAULT)?)=(?P<quote>["\']?)(?P<value>.*?)(?P=quote)\s*$'
)


def cmdline_key(text: str) -> str:
    """Debian/Ubuntu use GRUB_CMDLINE_LINUX_DEFAULT; Fedora only has GRUB_CMDLINE_LINUX."""
    keys = {m.group("key") for line in text.splitlines() if (m := _LINE.match(line))}
    return (
        "GRUB_CMDLINE_LINUX_DEFAULT"
        if "GRUB_CMDLINE_LINUX_DEFAULT" in keys or not keys
        else "GRUB_CMDLINE_LINUX"
    )


def grub_args(text: str) -> list[str]:
    """The arguments of the line ``cmdline_key`` chooses."""
    key = cmdline_key(text)
    for line in text.splitlines():
        match = _LINE.match(line)
        if match and match.group("key") == key:
            return match.group("value").split()
    return []


def edit_grub(text: str, add: list[str], remove: list[str]) -> str:
    """Set ``add`` (replacing any argument with the same name) and drop ``remove`` on the
    command-line variable, keeping every other argument, its order, the quoting and every
    other line as they are."""
    key = cmdline_key(text)
    names = {arg.split("=", 1)[0] for arg in add}
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        match = _LINE.match(line.rstrip("\n"))
        if not match or match.group("key") != key:
            continue
        if "$" in match.group("value") or "`" in match.group("value"):
            raise ParseError("command line uses shell expansion; edit it by hand", line)
        kept = [
            a
            for a in match.group("value").split()
            if a not in remove and a.split("=", 1)[0] not in names
        ]
        quote = match.group("quote") or '"'
        ending = "\n" if line.endswith("\n") else ""
        lines[index] = f"{key}={quote}{' '.join(kept + add)}{quote}{ending}"
        return "".join(lines)
    tail = "" if not text or text.endswith("\n") else "\n"
    return f"{text}{tail}{key}={shlex.quote(' '.join(add))}\n"


def changed_lines(before: str, after: str) -> str:
    """The lines of ``after`` that differ from ``before`` (for showing an edit)."""
    old = set(before.splitlines())
    return "\n".join(line for line in after.splitlines() if line not in old)
