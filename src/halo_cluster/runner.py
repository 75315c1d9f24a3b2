"""Side effects behind one method: ``Runner.run(argv, stdin, timeout) -> Result``.

LocalRunner runs a process here; SSHRunner runs argv on a node through the system ``ssh``
(BatchMode, ConnectTimeout, the user's ssh config honoured, one shared connection per node)
with the remote command quoted word by word, so no argument is ever re-split by the remote
shell; FakeRunner answers from a table, for tests. ``on_line`` (optional) receives each stdout
line while the command runs (progress of long remote work); the Result has the whole output.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import stat
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from halo_cluster.atomic import atomic_write
from halo_cluster.nodecode import as_halo

TIMED_OUT = 124
CANNOT_RUN = 126
NOT_FOUND = 127


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def error_text(self) -> str:
        text = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return text[-1] if text else f"exit code {self.returncode}"


LineSink = Callable[[str], None]


RAY_TOKEN_ENV = "HALO_RAY_TOKEN"  # a Ray auth token in a script's env (see cluster/auth.py)


def exports(env: Mapping[str, str]) -> str:
    """``export NAME=value`` lines for a script fed to ``bash -s``, every value quoted. A Ray
    token (``RAY_TOKEN_ENV``) becomes a 0600 token file in the node's state directory and
    ``RAY_AUTH_MODE=token`` + ``RAY_AUTH_TOKEN_PATH`` pointing at it."""
    lines = [f"export {k}={shlex.quote(v)}\n" for k, v in env.items() if k != RAY_TOKEN_ENV]
    token = env.get(RAY_TOKEN_ENV)
    if token:
        import hashlib

        name = f"ray-{hashlib.sha256(token.encode()).hexdigest()[:12]}.token"
        lines += [
            '_halo_state="${XDG_STATE_HOME:-$HOME/.local/state}/halo"\n',
            f'(umask 077 && mkdir -p "$_halo_state" && printf %s {shlex.quote(token)} '
            f'> "$_halo_state/{name}")\n',
            f'export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$_halo_state/{name}"\n',
        ]
    return "".join(lines)


class Runner(Protocol):
    def run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        timeout: float = 30.0,
        on_line: LineSink | None = None,
    ) -> Result: ...


class LocalRunner:
    def start(
        self,
        argv: Sequence[str],
        stderr: int | IO[bytes] = subprocess.DEVNULL,
        new_session: bool = False,
    ) -> subprocess.Popen[bytes]:
        """A process that keeps running in the background (a lab node's init, an SSH tunnel, a
        load generator): no stdin, stdout discarded, stderr where asked; its owner ends it."""
        out = subprocess.DEVNULL
        return subprocess.Popen(
            list(argv), stdin=out, stdout=out, stderr=stderr, start_new_session=new_session
        )

    def run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        timeout: float = 30.0,
        on_line: LineSink | None = None,
    ) -> Result:
        args = tuple(argv)
        if on_line is not None:
            return _streamed(args, stdin, timeout, on_line)
        try:
            done = subprocess.run(
                args,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                errors="replace",
            )
        except subprocess.TimeoutExpired:
            return Result(args, TIMED_OUT, "", f"timed out after {timeout:g} s")
        except OSError as err:
            return _not_started(args, err)
        return Result(args, done.returncode, done.stdout, done.stderr)


@dataclass(frozen=True)
class SSHRunner:
    target: str
    ssh_config: Path | None = None
    connect_timeout_s: int = 5
    local: Runner = field(default_factory=LocalRunner)
    share: bool = True  # one connection per node, reused by every command

    def ssh_options(self, tunnel: bool = False) -> list[str]:
        """``ssh`` and its options, up to the ``--`` before the target.

        Commands go through the node's shared connection (a ControlMaster in halo's
        per-user control directory, unless the ssh config shares connections itself). A
        tunnel (``ssh -N -L``) must own its connection: through a master its forward would
        be handed to the master and outlive the tunnel, so ``tunnel=True`` turns sharing
        off for that one ssh."""
        command = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout_s}"]
        shared = sharing_config(self.ssh_config) if self.share and not tunnel else None
        config = shared or self.ssh_config
        if config is not None:
            command += ["-F", str(config)]
        if tunnel:
            command += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
        return command

    def ssh_argv(self, argv: Sequence[str]) -> list[str]:
        """``[ssh, options…, "--", target, command]``. "--" first: a target can never be read
        as an option. ssh hands the remote side one string: every word is quoted so it is
        parsed back exactly. Without a command (a session, or a tunnel built from these
        options) the connection is its own, never a shared one."""
        return [*self.ssh_options(tunnel=not argv), "--", self.target, shlex.join(argv)]

    def run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        timeout: float = 30.0,
        on_line: LineSink | None = None,
    ) -> Result:
        result = self.local.run(self.ssh_argv(argv), stdin, timeout, on_line)
        return Result(
            tuple(argv), result.returncode, result.stdout, _MUX_RACE.sub("", result.stderr)
        )


# -- shared SSH connections --------------------------------------------------------------
# halo runs many short commands per node; each fresh ssh pays a TCP and SSH handshake (and
# key exchange). One ControlMaster per node, kept for CONTROL_PERSIST_S after its last use,
# makes them cost a channel each. The sockets live in a per-user 0700 directory. halo's
# settings come *after* the user's own ssh config (an Include in a small generated config),
# so whatever that config says wins: a config that shares connections itself (the lab's
# does) keeps its one master per node, and "ControlMaster no" / "ControlPath none" there
# turns halo's sharing off.
CONTROL_PERSIST_S = 600
# sun_path holds 108 bytes: the directory, "/", 40 hex digits of %C, the 17-character random
# suffix ssh appends to the name while it creates the socket, and the final NUL
MAX_CONTROL_DIR = 108 - 1 - 40 - 17 - 1
_UNSAFE = re.compile(r'["*?\[\]%$\\\x00-\x1f\x7f]')  # quoting, globbing, ssh tokens
# Two first commands to a node at once both connect; one makes the master, the other says
# so on stderr and carries on on its own connection (as without sharing): not the command's
# own output.
_MUX_RACE = re.compile(r"^ControlSocket \S+ already exists, disabling multiplexing\r?\n", re.M)
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
            path.parent.mkdir(parents=True, exist_ok=True)
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


@dataclass
class FakeRunner:
    """Answers by the first matching rule: (argv prefix, Result or function of argv)."""

    rules: list[tuple[tuple[str, ...], Result | Callable[[tuple[str, ...]], Result]]] = field(
        default_factory=list
    )
    calls: list[tuple[str, ...]] = field(default_factory=list)
    stdins: list[str | None] = field(default_factory=list)

    def on(
        self, prefix: Sequence[str], answer: Result | Callable[[tuple[str, ...]], Result]
    ) -> FakeRunner:
        self.rules.append((tuple(prefix), answer))
        return self

    def run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        timeout: float = 30.0,
        on_line: LineSink | None = None,
    ) -> Result:
        args = tuple(argv)
        self.calls.append(args)
        self.stdins.append(stdin)
        wanted = as_halo(args)  # halo's node code matches the rules for "halo CMD…"
        for prefix, answer in self.rules:
            if wanted[: len(prefix)] == prefix:
                result = answer(args) if callable(answer) else answer
                for line in result.stdout.splitlines() if on_line else ():
                    on_line(line)  # type: ignore[misc]
                return result
        return Result(args, NOT_FOUND, "", f"{args[0]}: command not found")


def _not_started(args: tuple[str, ...], err: OSError) -> Result:
    """A program that could not be started, with the shell's exit codes: 127 when it is not
    found (also when a PATH entry cannot be searched), 126 otherwise."""
    searched = isinstance(err, PermissionError) and "/" not in args[0]  # a PATH entry
    if isinstance(err, FileNotFoundError) or searched:
        said = f"{args[0]}: " + (str(err.strerror) if "/" in args[0] else "command not found")
        return Result(args, NOT_FOUND, "", said)
    return Result(args, CANNOT_RUN, "", f"{args[0]}: {err.strerror or err}")


def _streamed(
    args: tuple[str, ...], stdin: str | None, timeout: float, on_line: LineSink
) -> Result:
    """Run ``args`` handing each stdout line to ``on_line`` as it comes (progress of long
    remote work). The process is killed on timeout and on Ctrl-C (which is then re-raised)."""
    import threading

    try:
        process = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
        )
    except OSError as err:
        return _not_started(args, err)
    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        process.kill()

    timer = threading.Timer(timeout, expire)
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.append(process.stderr.read()), daemon=True)  # type: ignore[union-attr]
    lines: list[str] = []
    try:
        timer.start()
        reader.start()
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(stdin or "")
            process.stdin.close()
        except BrokenPipeError:
            pass
        for line in process.stdout:
            lines.append(line)
            on_line(line.rstrip("\n"))
        process.wait()
        reader.join(5)
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        timer.cancel()
    if timed_out.is_set():
        return Result(args, TIMED_OUT, "".join(lines), f"timed out after {timeout:g} s")
    return Result(args, process.returncode, "".join(lines), "".join(errors))
