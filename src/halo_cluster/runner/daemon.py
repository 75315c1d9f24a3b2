"""A halo program that keeps running on a node (the supervisor on the head, the exporter on
every node) as one systemd unit: its text, for the manager that runs it, and the one script
that installs it and the one that removes it (pure: text for ``bash -s``).

The install picks the manager on the node: the system's when the script runs as root, the
user's when ``user_manager`` allows it and the user has lingering on (``loginctl
enable-linger``; else the user's manager, and the program with it, ends at logout), none
where systemd does not run. It sets ``$mode`` to ``systemd``, ``systemd-user`` or ``none``
for the caller to act on (the supervisor then runs detached, the exporter says so). The unit
file is written beside its place and renamed into it, then the unit is enabled (started at
boot) and restarted."""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

SYSTEM_UNITS = "/etc/systemd/system"
USER_UNITS = '"${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"'
SYSTEM, USER, NONE = "systemd", "systemd-user", "none"


@dataclass(frozen=True)
class Daemon:
    unit: str  # "halo-exporter.service"
    description: str
    argv: tuple[str, ...]
    comment: str | None = None  # a first line for whoever reads the file
    start_limit: tuple[int, int] | None = None  # (interval_s, burst) before systemd gives up
    service: tuple[str, ...] = ()  # more [Service] lines (KillMode, sandboxing, limits)
    user_manager: bool = False  # may run in the user's manager when not root

    def text(self, manager: str = SYSTEM) -> str:
        """The unit file for ``manager`` (the user's has no network-online.target)."""
        head = [f"# {self.comment}"] if self.comment else []
        unit = ["[Unit]", f"Description={self.description}"]
        if manager == SYSTEM:
            unit += ["After=network-online.target", "Wants=network-online.target"]
        if self.start_limit is not None:
            interval, burst = self.start_limit
            unit += [f"StartLimitIntervalSec={interval}", f"StartLimitBurst={burst}"]
        service = ["[Service]", "Type=simple", f"ExecStart={systemd_join(self.argv)}",
                   "Restart=on-failure", "RestartSec=5", *self.service]  # fmt: skip
        wanted = "multi-user.target" if manager == SYSTEM else "default.target"
        sections = ["\n".join(head + unit), "\n".join(service), f"[Install]\nWantedBy={wanted}"]
        return "\n\n".join(sections) + "\n"


_PLAIN = frozenset("/._-:=,@+")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t"}
_UNESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t"}


def _escape(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    if char == "$":
        return "$$"
    if char.isprintable() and char not in "\x1c\x1d\x1e\x85":  # not a line break either
        return char
    code = ord(char)
    if code < 0x80:  # systemd reads \xNN as one byte: above 0x7f a character is \u
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def systemd_join(argv: Sequence[str]) -> str:
    """A command line as systemd reads ExecStart: words in double quotes where needed, with
    C escapes (backslash, quote, control characters: one line whatever a word holds), ``$``
    and ``%`` doubled (systemd's variables and specifiers)."""
    words = []
    for word in argv:
        text = word.replace("%", "%%")
        if text and all(c.isascii() and (c.isalnum() or c in _PLAIN) for c in text):
            words.append(text)
        else:
            words.append('"' + "".join(_escape(c) for c in text) + '"')
    return " ".join(words)


def systemd_split(line: str) -> list[str]:
    """The inverse of ``systemd_join`` for what it writes (how the lab runs a unit's
    command where no systemd runs)."""
    words: list[str] = []
    i = 0
    while i < len(line):
        if line[i] == " ":
            i += 1
            continue
        if line[i] != '"':
            end = line.find(" ", i)
            end = len(line) if end < 0 else end
            words.append(line[i:end].replace("$$", "$").replace("%%", "%"))
            i = end
            continue
        word, i = _quoted(line, i + 1)
        words.append(word)
    return words


def _quoted(line: str, i: int) -> tuple[str, int]:
    """The word of a double-quoted run starting after its quote, and where it ends."""
    out = []
    while i < len(line) and line[i] != '"':
        char = line[i]
        if char == "\\" and i + 1 < len(line):
            kind = line[i + 1]
            width = {"x": 2, "u": 4, "U": 8}.get(kind)
            if width is not None:
                out.append(chr(int(line[i + 2 : i + 2 + width], 16)))
                i += 2 + width
                continue
            out.append(_UNESCAPES.get(kind, kind))
            i += 2
            continue
        if line.startswith("$$", i) or line.startswith("%%", i):
            i += 1
        out.append(line[i])
        i += 1
    if i >= len(line):
        raise ValueError("an ExecStart word without its closing quote")
    return "".join(out), i + 1


def exec_start(text: str) -> list[str]:
    """The command of a unit file's ExecStart line (systemd's lines end at newlines only)."""
    for line in text.split("\n"):
        if line.startswith("ExecStart="):
            return systemd_split(line[len("ExecStart=") :])
    raise ValueError("no ExecStart line")


def _manager() -> str:
    return (
        f"mode={NONE}\n"
        "if [ -d /run/systemd/system ] && command -v systemctl > /dev/null 2>&1; then\n"
        f'  if [ "$(id -u)" = 0 ]; then mode={SYSTEM}\n'
        '  elif [ "$user_ok" = 1 ] && '
        '[ "$(loginctl show-user "$(id -un)" -p Linger --value 2>/dev/null)" = yes ]; then\n'
        f"    mode={USER}\n"
        "  fi\n"
        "fi\n"
    )


def _heredoc(text: str) -> str:
    end = f"HALO_UNIT_{secrets.token_hex(8)}"  # an end no line of the unit can be
    return f"cat > \"$tmp\" <<'{end}'\n{text}{end}\n"


def install_script(daemon: Daemon) -> str:
    """Shell lines: the manager chosen (``$mode``), the unit written there, enabled and
    restarted; nothing where ``$mode`` is ``none``."""
    return (
        f"unit={shlex.quote(daemon.unit)}\nuser_ok={int(daemon.user_manager)}\n{_manager()}"
        f'if [ "$mode" = {SYSTEM} ]; then ctl="systemctl"; dir={SYSTEM_UNITS}\n'
        f'elif [ "$mode" = {USER} ]; then ctl="systemctl --user"; dir={USER_UNITS}\nfi\n'
        f'if [ "$mode" != {NONE} ]; then\n'
        '  mkdir -p "$dir"\n  tmp="$dir/.$unit.$$"\n'
        f'  if [ "$mode" = {SYSTEM} ]; then\n{_heredoc(daemon.text(SYSTEM))}'
        f"  else\n{_heredoc(daemon.text(USER))}  fi\n"
        '  mv -f "$tmp" "$dir/$unit"\n'
        "  $ctl daemon-reload\n"
        '  $ctl enable --quiet "$unit"\n'
        '  $ctl restart "$unit"\n'
        "fi\n"
    )


def remove_script(unit: str) -> str:
    """Shell lines: the unit disabled, stopped and removed from whichever manager has it (so
    that no boot starts it again); ``$svc`` is 0 when it was running, else 3."""
    return (
        f"unit={shlex.quote(unit)}\nsvc=3\n"
        f'for f in {SYSTEM_UNITS}/"$unit" {USER_UNITS}/"$unit"; do\n'
        '  [ -f "$f" ] || continue\n'
        f'  case "$f" in {SYSTEM_UNITS}/*) ctl="systemctl" ;; *) ctl="systemctl --user" ;; esac\n'
        '  if $ctl is-active --quiet "$unit" 2>/dev/null; then svc=0; fi\n'
        '  $ctl disable --now "$unit" > /dev/null 2>&1 || true\n'
        '  rm -f "$f"\n'
        "  $ctl daemon-reload > /dev/null 2>&1 || true\n"
        "done\n"
    )
