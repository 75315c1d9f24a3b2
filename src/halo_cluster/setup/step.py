"""A setup step and its actions: what every step says of itself (done or not, the exact
commands, a reboot after it), whichever part of the host it sets up."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from halo_cluster.jsonout import JsonObject


@dataclass(frozen=True)
class Action:
    """Run argv, or write ``content`` to a root-relative ``path``."""

    argv: tuple[str, ...] = ()
    path: str = ""
    content: str = ""
    shown: str = ""  # for edits: the changed lines only

    def display(self) -> str:
        if self.path:
            verb, text = ("edit", self.shown) if self.shown else ("write", self.content)
            return f"{verb} /{self.path}:\n" + "".join(
                f"    {line}\n" for line in text.splitlines()
            )
        return "sudo " + shlex.join(self.argv)


@dataclass(frozen=True)
class Step:
    id: str
    title: str
    done: bool
    actions: tuple[Action, ...] = ()
    reboot: bool = False
    check: str | None = None
    note: str = ""
    evidence: tuple[str, ...] = field(default=())

    def to_dict(self) -> JsonObject:
        return {
            "id": self.id,
            "title": self.title,
            "done": self.done,
            "commands": [a.display().rstrip("\n") for a in self.actions],
            "reboot": self.reboot,
            "check": self.check,
            "note": self.note,
        }
