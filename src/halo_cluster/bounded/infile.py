"""Files someone named (a halo.toml, a result, a config.json, a GGUF), opened and read with a
bound: a regular file only, and never more than its limit.

A FIFO, a device (``/dev/zero``) or a directory is refused in one line before anything is
read: the open does not wait for a FIFO's writer (``O_NONBLOCK``), and the type is asked of
the open descriptor (``fstat``), so a link swapped after a check cannot slip one in. A file
larger than its limit is refused after reading one byte past the limit, whatever its size
says (a file in /proc says 0). Every error is one line of the caller's error class, naming
the file; the node side uses this module too (Python 3.9).
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO, Union

from halo_cluster.errors import HaloError, UsageError

Where = Union[str, "os.PathLike[str]"]
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def open_regular(path: Where, error: type[HaloError] = UsageError) -> BinaryIO:
    """``path`` open for reading (links followed) when it is a regular file; ``error`` (one
    line) when it cannot be opened or is anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise error(f"cannot read {path}: {err.strerror or err}") from None
    except ValueError:  # a NUL in the name
        raise error(f"cannot read {os.fspath(path)!a}: a NUL in the file name") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a file")
            raise error(f"{path}: {kind}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Where, limit: int, what: str, error: type[HaloError] = UsageError) -> bytes:
    """At most ``limit`` bytes of the regular file ``path``; ``error`` (one line) when it is
    not one, cannot be read, or is larger (``what`` names what it should be: "a halo.toml")."""
    with open_regular(path, error) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as err:
            raise error(f"cannot read {path}: {err.strerror or err}") from None
    if len(data) > limit:
        raise error(f"{path}: larger than {size_text(limit)}; not {what}")
    return data


def read_text(path: Where, limit: int, what: str, error: type[HaloError] = UsageError) -> str:
    """``read_bytes`` decoded as UTF-8 (a byte order mark dropped); one line when it is not."""
    data = read_bytes(path, limit, what, error)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{path}: not UTF-8 text (byte {err.start})") from None
    return text[1:] if text.startswith("\ufeff") else text


def size_text(limit: int) -> str:
    """A limit as people write it: 1 MiB, 64 MiB, 512 KiB, 100 bytes."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if limit >= scale and limit % scale == 0:
            return f"{limit // scale} {unit}"
    return f"{limit} bytes"
