"""What a hop keeps of a model's stream: the files it needs, written to its store and hashed
on a thread of their own, while the hop's own thread goes on receiving and forwarding.

The hop's thread reads the stream into blocks (``Blocks``: a few MiB each, a fixed number in
flight, so a hop holds at most BLOCKS x BLOCK bytes whatever the model's size) and hands each
one to the ``Sink`` before it forwards it; the sink's thread writes it (where this node needs
it: a resumed partial is not written twice) and the ``Hasher``'s thread feeds it to sha256,
then gives the block back (file writes and hashlib both let go of the GIL on a buffer this
large: receiving and forwarding, writing and hashing run on a core each where there are
cores). A file received
whole goes on to the ``Finisher``'s thread: made durable (one fsync), checked against the
manifest and renamed into place, while the next file is written.

A sink that falls behind holds the hop back (no free block), and the chain behind it: one
that has not given a block back within the hop's idle limit (a disk that hangs) is left
behind: this node stops writing (its files fail, named, with why) and the hop goes on
forwarding with blocks of its own, so a stuck disk costs the others that limit, not the
transfer. Standard library only, Python 3.9."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from halo_cluster.errors import ModelError
from halo_cluster.modelstore.store import Receiving, Store
from halo_cluster.modelstore.transfer import PipeEvent

BLOCK = 4 << 20  # what one read of the stream fills
BLOCKS = 8  # in flight per hop: 32 MiB at most
Emit = Callable[[PipeEvent], None]


class Blocks:
    """The hop's blocks: taken by its thread to read into, given back once written."""

    def __init__(self, count: int | None = None, size: int | None = None) -> None:
        self.size = size or BLOCK
        self.given = 0  # blocks given back so far: the sink's progress
        self._free: queue.Queue[bytearray] = queue.Queue()
        for _ in range(count or BLOCKS):
            self._free.put(bytearray(self.size))

    def take(self, timeout: float) -> bytearray | None:
        """A free block, or None when none came back within ``timeout`` seconds."""
        try:
            return self._free.get(timeout=timeout)
        except queue.Empty:
            return None

    def give(self, block: bytearray) -> None:
        self.given += 1
        self._free.put(block)


class Sink:
    """The files of the stream this hop writes, told in stream order by the hop's thread
    (``open``, ``feed``, ``end``) and written on the sink's own thread. ``verified`` and
    ``failed`` fill as files end; ``written`` counts the bytes written so far."""

    def __init__(
        self,
        store: Store | None,
        name: str,
        want: dict[str, int],
        blocks: Blocks,
        emit: Emit,
        refused: str | None = None,
    ) -> None:
        self.store, self.name, self.want, self.blocks = store, name, want, blocks
        self.verified: list[str] = []
        self.failed: dict[str, str] = {}
        self.written = 0
        self.disk_error = refused  # once set, this node writes no more files
        self.left_behind = False
        self.opening = False  # opening a file (reading a resumed partial's prefix again)
        self._finisher = Finisher(self.verified, self.failed, emit)
        self._hasher = Hasher(blocks, self._finisher)
        self._queue: queue.Queue[tuple[str, object, int, int]] = queue.Queue()
        self._receiving: Receiving | None = None
        self._thread: threading.Thread | None = None

    def keeps(self, path: str) -> bool:
        """Whether this hop writes ``path`` (as far as known now)."""
        return (
            self.store is not None
            and path in self.want
            and self.disk_error is None
            and not self.left_behind
        )

    def open(self, path: str, size: int, sha256: str) -> None:
        self._put(("open", (path, size, sha256), 0, 0))

    def feed(self, block: bytearray, length: int, position: int) -> None:
        """``block[:length]`` is the file's bytes from ``position``; the block goes back to
        the pool once written."""
        self._put(("data", block, length, position))

    def end(self) -> None:
        self._put(("end", None, 0, 0))

    def stalled(self, since: int) -> bool:
        """No block given back since the pool's count was ``since``, and not re-reading a
        resumed partial's prefix (that gives none back, however long it takes)."""
        return self.blocks.given == since and not self.opening

    def abandon(self, seconds: float) -> None:
        """Left behind: its thread gave no block back for ``seconds``. The files it was
        given and had not finished fail; nothing more is written."""
        self.left_behind = True
        why = f"the disk took no data for {seconds:g} s; this node stopped writing"
        self.disk_error = self.disk_error or why
        for path in self.want:
            if path not in self.verified:
                self.failed.setdefault(path, why)

    def close(self, idle_s: float) -> None:
        """Every file handed over is written, finished or failed. A sink that gives no block
        back for ``idle_s`` meanwhile is left behind (its threads are daemons, not waited
        for): a disk that hangs on the last blocks costs that long, not the transfer."""
        if self._thread is not None and not self.left_behind:
            self._queue.put(("stop", None, 0, 0))
            while self._thread.is_alive():
                since = self.blocks.given
                self._thread.join(idle_s)
                if self._thread.is_alive() and self.stalled(since):
                    self.abandon(idle_s)
                    return
        if not self.left_behind:
            self._hasher.wait()
            self._finisher.wait()

    def _put(self, item: tuple[str, object, int, int]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True, name="model-sink")
            self._thread.start()
        self._queue.put(item)

    def _run(self) -> None:
        while True:
            kind, value, length, position = self._queue.get()
            if kind == "stop":  # a file cut short stays a partial, to resume from
                if self._receiving is not None:
                    self._receiving.close()
                return
            if self.left_behind and kind == "end" and self._receiving is not None:
                self._receiving.close()  # never finished: what it holds stays a partial
                self._receiving = None
                continue
            if kind == "data":
                assert isinstance(value, bytearray)
                self._write(value, length, position)
            elif kind == "open":
                assert isinstance(value, tuple)
                self._open(*value)
            elif self._receiving is not None:  # end: finished once its last block is hashed
                self._hasher.end(self._receiving)
                self._receiving = None

    def _open(self, path: str, size: int, sha256: str) -> None:
        mine = self.want.get(path)
        if self.store is None or mine is None or self.disk_error is not None:
            return
        self.opening = True  # a resumed partial's prefix is read again: no block moves
        try:
            self._receiving = Receiving(self.store, self.name, path, size, sha256, mine)
        except (OSError, ModelError) as err:
            self._fail(path, err)
        finally:
            self.opening = False

    def _write(self, block: bytearray, length: int, position: int) -> None:
        """The block's bytes this node lacks written, then handed to the hasher (which gives
        the block back); a block with nothing to write goes back at once."""
        receiving = self._receiving
        end = position + length
        if receiving is None or self.left_behind or end <= receiving.written:
            self.blocks.give(block)
            return
        start = max(position, receiving.written)  # a resumed partial's prefix: not again
        try:
            receiving.put(memoryview(block)[start - position : length])
        except OSError as err:  # a full disk: this node stops writing, not forwarding
            self.blocks.give(block)
            receiving.close()
            self._receiving = None
            self._fail(receiving.rel, err)
            return
        self.written += end - start
        self._hasher.data(receiving, block, start - position, length)

    def _fail(self, path: str, err: BaseException) -> None:
        self.disk_error = why(err)
        self.failed[path] = self.disk_error


class Hasher:
    """sha256 of what the sink wrote, on a thread of its own (a block is hashed while the
    sink writes the next one: one core each), in the order written; a block goes back to the
    pool once hashed, a file to the finisher once its last block is."""

    def __init__(self, blocks: Blocks, finisher: Finisher) -> None:
        self.blocks, self.finisher = blocks, finisher
        self.queue: queue.Queue[tuple[Receiving | None, bytearray | None, int, int]]
        self.queue = queue.Queue()
        self.thread: threading.Thread | None = None

    def data(self, receiving: Receiving, block: bytearray, start: int, end: int) -> None:
        self._put((receiving, block, start, end))

    def end(self, receiving: Receiving) -> None:
        self._put((receiving, None, 0, 0))

    def wait(self) -> None:
        if self.thread is not None:
            self.queue.put((None, None, 0, 0))
            self.thread.join()

    def _put(self, item: tuple[Receiving | None, bytearray | None, int, int]) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, daemon=True, name="model-hash")
            self.thread.start()
        self.queue.put(item)

    def _run(self) -> None:
        while True:
            receiving, block, start, end = self.queue.get()
            if receiving is None:
                return
            if block is None:
                self.finisher.put(receiving)
                continue
            try:
                receiving.digest.update(memoryview(block)[start:end])
            finally:
                self.blocks.give(block)


class Finisher:
    """Files received whole, made durable (fsync), checked and renamed into place on a
    thread of their own: the sink writes the next file meanwhile, so a slow disk does not
    stall the chain behind it between files."""

    def __init__(self, verified: list[str], failed: dict[str, str], emit: Emit) -> None:
        self.verified, self.failed, self.emit = verified, failed, emit
        self.queue: queue.Queue[Receiving | None] = queue.Queue()
        self.thread: threading.Thread | None = None

    def put(self, receiving: Receiving) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, daemon=True, name="model-finish")
            self.thread.start()
        self.queue.put(receiving)

    def wait(self) -> None:
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join()

    def _run(self) -> None:
        while True:
            receiving = self.queue.get()
            if receiving is None:
                return
            path = receiving.rel
            try:
                receiving.finish()
                self.verified.append(path)
                self.emit(PipeEvent("file", path=path, verified=True))
            except (OSError, ModelError) as err:
                self.failed[path] = why(err)
                self.emit(PipeEvent("file", path=path, verified=False, reason=self.failed[path]))


def why(err: BaseException) -> str:
    if isinstance(err, OSError):
        where = f"{err.filename}: " if err.filename else ""
        return f"{where}{err.strerror or err}"
    return str(err)
