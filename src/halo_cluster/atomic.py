"""Atomic file writes: a temporary file in the target's directory, then one rename, so a
reader sees the old content or the new, never half of it (and a crash leaves the old).

``AtomicFile`` creates the temporary file when constructed (so a caller can tell "cannot
create it here" from a failed write) and renames it when its ``with`` block ends without
an error; on an error the temporary file is removed and the target left as it was.
The temporary file is created 0600 (``mkstemp``); ``mode`` sets the final permissions.

``write_new`` is for a file under a name of halo's choosing that must be its own (a result
named by the second it was saved): written whole, then linked into place only where the name
is free, so two writers never overwrite each other and a reader never sees half a file.

``write_output`` is for a file someone named for output (``halo report -o``, ``--out``): the
rename replaces a name, so it is used only where the name is a regular file or nothing; a
link is written through, in place (``-o /dev/stdout > file`` must not turn the system's
``/dev/stdout`` link into a file), and anything else (a device, a FIFO, a directory, a link
to one of those or to nothing) is refused in one line, as is a directory one cannot write.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
from types import TracebackType
from typing import TextIO

from halo_cluster.errors import UsageError


class AtomicFile:
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        mode: int | None = None,
        prefix: str | None = None,
        encoding: str = "utf-8",
    ) -> None:
        self.path = os.fspath(path)
        self.mode = mode
        directory = os.path.dirname(self.path) or "."
        name = os.path.basename(self.path)
        fd, self.tmp = tempfile.mkstemp(dir=directory, prefix=prefix or f".{name}.")
        self.handle: TextIO = os.fdopen(fd, "w", encoding=encoding)

    def __enter__(self) -> TextIO:
        return self.handle

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.handle.close()
            if kind is None:
                if self.mode is not None:
                    os.chmod(self.tmp, self.mode)
                os.replace(self.tmp, self.path)
                return
        except BaseException:
            self._discard()
            raise
        self._discard()

    def _discard(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.tmp)


def atomic_write(
    path: str | os.PathLike[str],
    text: str,
    *,
    mode: int | None = None,
    prefix: str | None = None,
    encoding: str = "utf-8",
) -> None:
    """Replace ``path`` with ``text`` atomically (see AtomicFile)."""
    with AtomicFile(path, mode=mode, prefix=prefix, encoding=encoding) as handle:
        handle.write(text)


def write_new(path: str | os.PathLike[str], text: str, *, mode: int = 0o644) -> None:
    """Create ``path`` holding ``text``, whole at once; FileExistsError (nothing written)
    when the name is taken, whoever took it and however recently."""
    target = os.fspath(path)
    handle = AtomicFile(target, mode=mode)
    try:
        with handle.handle as out:
            out.write(text)
        os.chmod(handle.tmp, mode)
        try:
            os.link(handle.tmp, target)  # exclusive: fails when the name exists
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links: reserve the name, then rename
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
            os.replace(handle.tmp, target)
    finally:
        handle._discard()


def write_output(path: str | os.PathLike[str], text: str, mode: int = 0o644) -> bool:
    """Write ``text`` to the output file ``path`` someone named (see the module's docstring);
    UsageError, one line, when it cannot be or must not be written. True when ``path`` led
    to this process's own standard output (``-o /dev/stdout > file``): it was written there,
    at its offset, and whatever the caller prints next belongs on stderr."""
    try:
        found: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        found = None
    except OSError as err:
        raise UsageError(f"cannot write {path}: {err.strerror or err}") from None
    try:
        if found is not None and stat.S_ISLNK(found.st_mode):
            return _write_through(path, text)
        if found is not None and not stat.S_ISREG(found.st_mode):
            raise _not_a_file(path)
        os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
        atomic_write(path, text, mode=mode)
        return False
    except OSError as err:
        raise UsageError(f"cannot write {path}: {err.strerror or err}") from None


def _write_through(link: str | os.PathLike[str], text: str) -> bool:
    """Into the regular file a link leads to, in place: nothing created, nothing renamed."""
    try:  # O_NONBLOCK: a link to a FIFO does not wait for a reader before it is refused
        fd = os.open(link, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UsageError(f"{link}: a link to nothing; give the path of a file to write") from None
    except OSError as err:
        if err.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO without a reader, a directory
            raise _not_a_file(link) from None
        raise
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise _not_a_file(link)
        if _is_stdout(found):  # through our own descriptor: its offset, its O_APPEND
            sys.stdout.write(text)
            sys.stdout.flush()
            return True
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        handle.write(text)
    return False


def _is_stdout(found: os.stat_result) -> bool:
    try:
        out = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # closed, or replaced by an object
        return False
    return (out.st_dev, out.st_ino) == (found.st_dev, found.st_ino)


def _not_a_file(path: str | os.PathLike[str]) -> UsageError:
    return UsageError(f"{path}: not a regular file; give the path of a file to write")
