"""One shared SSH connection per node: the generated ssh config that makes ``ssh`` share
them, the private directory their sockets live in, and ``close_connections`` for ``halo down``.

halo runs many short commands per node; each fresh ssh pays a TCP and SSH handshake (and
key exchange). One ControlMaster per node, kept for CONTROL_PERSIST_S after its last use,
makes them cost a channel each. The sockets live in a per-user 0700 directory. halo's
settings come *after* the user's own ssh config (an Include in a small generated config),
so whatever that config says wins: a config that shares connections itself (the lab's
does) keeps its one master per node, and "ControlMaster no" / "ControlPath none" there
turns halo's sharing off.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import threading
from collections.abc import Iterable
from pathlib import Path

from halo_cluster.atomic import atomic_write
from halo_cluster.runner.local import LocalRunner
from halo_cluster.runner.result import Runner

CONTROL_PERSIST_S = 600
# sun_path holds 108 bytes: the directory, "/", 40 hex digits of %C, the 17-character random
# suffix ssh appends to the name while it creates the socket, and the final NUL
MAX_CONTROL_DIR = 108 - 1 - 40 - 17 - 1
_UNSAFE = re.compile(r'["*?\[\]%$\\\x00-\x1f\x7f]')  # quoting, globbing, ssh tokens
_LOCK = threading.Lock()
_CONFIGS: dict[str | None, Path | None] = {}


def control_dir() -> Path | None:
    """This user's 0700 directory for shared SSH connections, created when missing:
    /run/user/UID/halo/ssh, else ~/.cache/halo/ssh, else /tmp/halo-UID/ssh (the first whose
    socket paths fit); None when none is private to this user (then nothing is shared)."""
    uid = os.geteuid()
    candidates = []
    if _owned_dir(Path(f"/run/user/{uid}"), uid):
        candidates.append(Path(f"/run/user/{uid}/halo/ssh"))
    with contextlib.suppress(RuntimeError, KeyError):
        candidates.append(Path.home() / ".cache" / "halo" / "ssh")
    candidates.append(Path(f"/tmp/halo-{uid}/ssh"))
    for path in candidates:
        fits = len(str(path)) <= MAX_CONTROL_DIR and not re.search(r"\s", str(path))
        if fits and not _UNSAFE.search(str(path)) and _private_dir(path, uid):
            return path
    return None


def _owned_dir(path: Path, uid: int) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == uid


def _private_dir(path: Path, uid: int) -> bool:
    """``path`` as a directory of ours, 0700 (its parent too under /tmp, where anyone could
    have made it first); False when that cannot be had."""
    try:
        if str(path).startswith("/tmp/"):
            with contextlib.suppress(FileExistsError):
                os.mkdir(path.parent, 0o700)
            if not _owned_dir(path.parent, uid) or os.lstat(path.parent).st_mode & 0o077:
                return False
        else:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # ~/.cache/halo
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        if not _owned_dir(path, uid):
            return False
        if os.lstat(path).st_mode & 0o077:
            os.chmod(path, 0o700)
    except OSError:
        return False
    return True


def sharing_config(ssh_config: Path | None) -> Path | None:
    """The generated ssh config that shares connections: the user's config (``ssh_config``,
    else ~/.ssh/config and /etc/ssh/ssh_config, as ssh reads them), then halo's defaults.
    None when connections cannot be shared here (no private directory, or a config path
    that cannot be included safely): then ssh runs as it would without halo."""
    key = None if ssh_config is None else os.path.abspath(ssh_config)
    with _LOCK:
        if key not in _CONFIGS:
            _CONFIGS[key] = _write_sharing_config(key)
        return _CONFIGS[key]


def _write_sharing_config(user_config: str | None) -> Path | None:
    if user_config is not None and (_UNSAFE.search(user_config) or not os.path.isfile(user_config)):
        return None  # ssh -F reports a missing config itself; an odd name is not included
    directory = control_dir()
    if directory is None:
        return None
    includes = [user_config] if user_config else ["~/.ssh/config", "/etc/ssh/ssh_config"]
    text = (
        "# written by halo: your ssh config first (what it sets wins), then halo's defaults\n"
        + "".join(f'Include "{path}"\n' for path in includes)
        + "Host *\n  ControlMaster auto\n"
        + f"  ControlPath {directory}/%C\n  ControlPersist {CONTROL_PERSIST_S}\n"
        # a node that died must fail its shared connection in seconds, not hang on it
        + "  ServerAliveInterval 5\n  ServerAliveCountMax 3\n"
    )
    path = directory / f"config-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    try:
        if not path.is_file() or path.read_text() != text:
            _prune(directory)
            atomic_write(path, text, prefix=".config.")  # 0600
    except OSError:
        return None
    return path


def _prune(directory: Path) -> None:
    """Forget generated configs whose ssh config is gone (labs come and go)."""
    for old in directory.glob("config-*"):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            included = re.findall(r'^Include "(/[^"]*)"$', old.read_text(), re.MULTILINE)
            if any(not os.path.exists(path) for path in included if path != "/etc/ssh/ssh_config"):
                old.unlink()


def close_connections(
    targets: Iterable[str], ssh_config: Path | None = None, runner: Runner | None = None
) -> list[str]:
    """End halo's shared connections to ``targets`` (for ``halo down``); the targets whose
    connection was open. Only masters in halo's control directory are ended: connections
    that the user's own ssh config shares (its own ControlPath) belong to the user."""
    directory = control_dir()
    config = sharing_config(ssh_config)
    if directory is None or config is None or not any(p.is_socket() for p in directory.iterdir()):
        return []
    local = runner or LocalRunner()
    closed = []
    for target in dict.fromkeys(targets):
        argv = ["ssh", "-F", str(config), "-o", f"ControlPath={directory}/%C"]
        if local.run([*argv, "-O", "exit", "--", target], timeout=10).ok:
            closed.append(target)
    return closed
