"""Atomic file writes: a temporary file in the target's directory, then one rename, so a
reader sees the old content or the new, never half of it (and a crash leaves the old).

``AtomicFile`` creates the temporary file when constructed (so a caller can tell "cannot
create it here" from a failed write) and renames it when its ``with`` block ends without
an error; on an error the temporary file is removed and the target left as it was.
The temporary file is created 0600 (``mkstemp``); ``mode`` sets the final permissions.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from types import TracebackType
from typing import TextIO


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
