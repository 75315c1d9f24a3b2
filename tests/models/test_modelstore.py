"""The model store on its own (no nodes): manifests and their parsing, hashing once, a
node's store (complete only when every file verified), and hops of a transfer over real
loopback sockets: a chain that writes and forwards, resume from a verified prefix, a wrong
secret refused, a stream cut short, a source that escapes its directory."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from halo_cluster.errors import ModelError
from halo_cluster.modelstore.manifest import (
    FileEntry,
    HashCache,
    Manifest,
    default_name,
    make_manifest,
    manifest_from,
    relative_ok,
    source_files,
)
from halo_cluster.modelstore.pipe import new_secret, relay
from halo_cluster.modelstore.store import Store
from halo_cluster.modelstore.transfer import PipeSpec, parse_pipe_spec


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _model(tmp: Path, files: dict[str, bytes]) -> Path:
    top = tmp / "src"
    for rel, data in files.items():
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_bytes(data)
    return top


FILES = {"config.json": b'{"a": 1}', "w/model.safetensors": os.urandom(3 << 20) + b"end"}


def _manifest(top: Path, cache: HashCache | None = None) -> Manifest:
    files, entry = source_files(str(top))
    return make_manifest("tiny", files, entry, str(top), cache or HashCache(None))


# -- manifests ------------------------------------------------------------------------------
def test_a_directory_becomes_a_manifest_of_every_file(tmp_path: Path) -> None:
    top = _model(tmp_path, {**FILES, ".cache/skip": b"x"})
    manifest = _manifest(top)
    assert manifest.files == tuple(
        FileEntry(rel, len(data), _sha(data)) for rel, data in sorted(FILES.items())
    )
    assert manifest_from(json.loads(json.dumps(manifest.to_dict()))) == manifest
    assert manifest.to_dict()["digest"] == manifest.digest
    renamed = Manifest("other", manifest.files, "", "elsewhere")
    assert renamed.digest == manifest.digest  # the content's identity, not its name


def test_a_split_gguf_brings_every_shard_and_names_the_first(tmp_path: Path) -> None:
    for i in (1, 2, 3):
        (tmp_path / f"big-{i:05d}-of-00003.gguf").write_bytes(b"GGUF" + bytes([i]))
    files, entry = source_files(str(tmp_path / "big-00001-of-00003.gguf"))
    assert [rel for rel, _ in files] == [f"big-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    assert entry == "big-00001-of-00003.gguf" and default_name(entry) == "big"
    (tmp_path / "big-00002-of-00003.gguf").unlink()
    with pytest.raises(ModelError, match=r"shard big-00002-of-00003\.gguf of this split GGUF"):
        source_files(str(tmp_path / "big-00001-of-00003.gguf"))


def test_a_link_out_of_the_source_is_refused(tmp_path: Path) -> None:
    top = _model(tmp_path, FILES)
    (tmp_path / "secret").write_text("x")
    (top / "leak").symlink_to(tmp_path / "secret")
    with pytest.raises(ModelError, match=r"leak: links out of .*src \(to .*secret\)"):
        source_files(str(top))
    (top / "leak").unlink()
    (top / "inside").symlink_to(top / "config.json")  # a link that stays inside is a file
    assert "inside" in [rel for rel, _ in source_files(str(top))[0]]


def test_missing_and_odd_sources_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"nope: No such file or directory"):
        source_files(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match=r"empty: no files"):
        source_files(str(tmp_path / "empty"))
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ModelError, match=r"fifo: not a directory or a regular file"):
        source_files(str(tmp_path / "fifo"))


def test_hashes_are_kept_by_size_mtime_and_inode(tmp_path: Path) -> None:
    top = _model(tmp_path, FILES)
    cache = HashCache(str(tmp_path / "hashes.json"))
    read: list[int] = []
    files, entry = source_files(str(top))
    first = make_manifest("tiny", files, entry, "s", cache, read.append)
    again: list[int] = []
    second = make_manifest("tiny", files, entry, "s", HashCache(cache.path), again.append)
    assert first == second
    # the second look read nothing: whole sizes reported at once from the cache
    assert sorted(again) == sorted(len(d) for d in FILES.values())
    assert len(read) > len(again)
    (top / "config.json").write_bytes(b'{"a": 2}')
    changed = make_manifest("tiny", files, entry, "s", HashCache(cache.path))
    assert changed.by_path()["config.json"].sha256 == _sha(b'{"a": 2}')


def test_a_file_that_changes_while_hashed_is_an_error(tmp_path: Path) -> None:
    top = _model(tmp_path, FILES)
    target = top / "w" / "model.safetensors"

    def grow(_n: int) -> None:  # the writer appends while halo reads
        with target.open("ab") as handle:
            handle.write(b"more")

    files, entry = source_files(str(top))
    with pytest.raises(ModelError, match=r"model\.safetensors: changed while being hashed"):
        make_manifest("tiny", files, entry, "s", HashCache(None), grow)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"schema": "other"}, "not a halo.model/1 manifest"),
        ({"schema": "halo.model/1", "name": "x", "files": {}}, "'files' must be a list"),
        (
            {"schema": "halo.model/1", "name": "x", "files": [{"path": "../x", "size": 1}]},
            r"files\[0\].path '../x' is not allowed",
        ),
        (
            {"schema": "halo.model/1", "name": "x", "files": [{"path": "a", "size": -1}]},
            r"files\[0\].size is not a size",
        ),
        (
            {"schema": "halo.model/1", "name": "x/y", "files": []},
            "model name 'x/y'",
        ),
        (
            {"schema": "halo.model/1", "name": "x", "files": [], "entry": "nope"},
            "'entry' names no file",
        ),
    ],
)
def test_a_bad_manifest_is_one_line(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelError, match=message):
        manifest_from(data, "m.json")


_ENTRY = st.fixed_dictionaries(
    {},
    optional={
        "path": st.none() | st.text(max_size=12) | st.sampled_from(["a", "../a", "/a", ".h/a"]),
        "size": st.none() | st.integers() | st.booleans() | st.text(max_size=4),
        "sha256": st.none() | st.text(max_size=4) | st.just("0" * 64),
    },
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.none() | st.integers() | st.text(max_size=8) | st.lists(_ENTRY | st.integers(), max_size=6)
)
def test_anything_is_a_manifest_or_one_modelerror(data: Any) -> None:
    try:
        manifest_from({"schema": "halo.model/1", "name": "x", "files": data})
    except ModelError as err:
        assert "\n" not in str(err)


@given(st.text())
def test_relative_paths_never_leave_the_model(path: str) -> None:
    if relative_ok(path):
        parts = path.split("/")
        assert ".." not in parts and not path.startswith("/") and "\x00" not in path
        assert os.path.normpath("/m/" + path).startswith("/m/")


# -- hops over loopback ----------------------------------------------------------------------
def _listening(spec: dict[str, Any]) -> tuple[threading.Thread, dict[str, Any], threading.Event]:
    events: dict[str, Any] = {"all": []}
    ready = threading.Event()

    def emit(event: dict[str, Any]) -> None:
        events["all"].append(event)
        if event["event"] == "listening":
            events["port"] = event["port"]
            ready.set()
        if event["event"] == "done":
            events["done"] = event
            ready.set()

    typed = _typed(spec)
    thread = threading.Thread(target=relay, args=(typed, lambda e: emit(e.to_dict())), daemon=True)
    thread.start()
    assert ready.wait(10)
    return thread, events, ready


def _typed(spec: dict[str, Any]) -> PipeSpec:
    """The spec as the node reads it from its environment."""
    return parse_pipe_spec(json.dumps(spec))


def _spec(
    manifest: Manifest, store: Path | None, want: dict[str, int], source: dict[str, Any]
) -> dict[str, Any]:
    stream = [
        {**f.to_dict(), "offset": min(want.get(f.path, 0), f.size)}
        for f in manifest.files
        if f.path in want
    ]
    return {
        "store": str(store) if store else None,
        "target": store is not None,
        "manifest": manifest.to_dict(),
        "stream": stream,
        "want": want,
        "input": source,
        "route": [],
        "wait_s": 10,
        "idle_s": 10,
    }


def _chain(
    receivers: list[dict[str, Any]], source: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``receivers`` (specs without their input) listening on loopback, last first, and
    ``source`` run with the route through them; what the source said and each receiver's
    events, in chain order, once every hop ended."""
    secrets = [new_secret() for _ in receivers]
    started = []
    for spec, secret in reversed(list(zip(receivers, secrets, strict=True))):
        started.insert(0, _listening({**spec, "input": {"listen": "127.0.0.1", "secret": secret}}))
    route = [
        {"address": "127.0.0.1", "port": events["port"], "secret": secret}
        for (_thread, events, _ready), secret in zip(started, secrets, strict=True)
    ]
    sent = relay(_typed({**source, "route": route}), lambda _e: None).to_dict()
    for thread, _events, _ready in started:
        thread.join(10)
    return sent, [events for _thread, events, _ready in started]


def test_a_chain_writes_and_forwards_and_every_node_verifies(tmp_path: Path) -> None:
    top = _model(tmp_path, FILES)
    manifest = _manifest(top)
    want = {f.path: 0 for f in manifest.files}
    sent, (e1, e2) = _chain(
        [_spec(manifest, tmp_path / "n1", want, {}), _spec(manifest, tmp_path / "n2", want, {})],
        _spec(manifest, None, want, {"files": dict(source_files(str(top))[0])}),
    )
    assert sent["forwarded"] and sent["complete"] is None
    for node, events in (("n1", e1), ("n2", e2)):
        done = events["done"]
        assert (done["complete"], done["error"], done["failed"]) == (True, None, {})
        assert sorted(done["verified"]) == sorted(FILES)
        store = Store(str(tmp_path / node))
        assert store.manifest("tiny") == manifest
        for rel, data in FILES.items():
            assert (tmp_path / node / "tiny" / rel).read_bytes() == data
        assert not (tmp_path / node / "tiny" / ".halo" / "partial").exists()
        assert store.verify("tiny").differ == ()


def test_a_partial_resumes_from_its_prefix_and_a_bad_prefix_fails_only_its_file(
    tmp_path: Path,
) -> None:
    top = _model(tmp_path, FILES)
    manifest = _manifest(top)
    big = "w/model.safetensors"
    store = Store(str(tmp_path / "n1"))
    partial = Path(store.partial("tiny", big))
    partial.parent.mkdir(parents=True)
    partial.write_bytes(FILES[big][: 1 << 20])
    state = store.state("tiny").to_dict()
    assert state["partials"] == {big: {"size": 1 << 20, "sha256": _sha(FILES[big][: 1 << 20])}}
    assert (state["complete"], state["files"]) == (False, {})
    secret = new_secret()
    want = {"config.json": 0, big: 1 << 20}
    receiver = _spec(manifest, tmp_path / "n1", want, {"listen": "127.0.0.1", "secret": secret})
    thread, events, _ = _listening(receiver)
    source = _spec(manifest, None, want, {"files": dict(source_files(str(top))[0])})
    source["route"] = [{"address": "127.0.0.1", "port": events["port"], "secret": secret}]
    relay(_typed(source), lambda _e: None)
    thread.join(10)
    done = events["done"]
    assert done["complete"] is True
    # only what was missing crossed: the rest of the big file and the small one
    assert done["received"] == len(FILES[big]) - (1 << 20) + len(FILES["config.json"])
    assert (tmp_path / "n1" / "tiny" / big).read_bytes() == FILES[big]

    # a prefix that is not the source's: the file fails its sha256, the partial is dropped
    store.invalidate("tiny")
    (tmp_path / "n1" / "tiny" / big).unlink()
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_bytes(b"\0" * 1024)
    receiver = _spec(
        manifest, tmp_path / "n1", {big: 1024}, {"listen": "127.0.0.1", "secret": secret}
    )
    thread, events, _ = _listening(receiver)
    source = _spec(manifest, None, {big: 1024}, {"files": dict(source_files(str(top))[0])})
    source["route"] = [{"address": "127.0.0.1", "port": events["port"], "secret": secret}]
    relay(_typed(source), lambda _e: None)
    thread.join(10)
    done = events["done"]
    assert done["complete"] is False and list(done["failed"]) == [big]
    assert "not the source's" in done["failed"][big]
    assert not partial.exists() and Store(str(tmp_path / "n1")).manifest("tiny") is None


def test_a_wrong_secret_is_refused_and_the_right_one_admitted(tmp_path: Path) -> None:
    import socket

    top = _model(tmp_path, {"a": b"x" * 100})
    manifest = _manifest(top)
    secret = new_secret()
    receiver = _spec(manifest, tmp_path / "n1", {"a": 0}, {"listen": "127.0.0.1", "secret": secret})
    thread, events, _ = _listening(receiver)
    with socket.create_connection(("127.0.0.1", events["port"])) as wrong:
        wrong.sendall(b"0" * 64 + b"\n" + b"x" * 100)
        with contextlib.suppress(ConnectionResetError):  # closed with our bytes unread
            assert wrong.recv(1) == b""  # closed on us
    source = _spec(manifest, None, {"a": 0}, {"files": dict(source_files(str(top))[0])})
    source["route"] = [{"address": "127.0.0.1", "port": events["port"], "secret": secret}]
    relay(_typed(source), lambda _e: None)
    thread.join(10)
    kinds = [e["event"] for e in events["all"]]
    assert kinds[:3] == ["listening", "refused", "admitted"] and events["done"]["complete"]


def test_a_stream_cut_short_keeps_the_partial_and_marks_nothing_complete(tmp_path: Path) -> None:
    import socket

    data = os.urandom(1 << 20)
    top = _model(tmp_path, {"a": data})
    manifest = _manifest(top)
    secret = new_secret()
    receiver = _spec(manifest, tmp_path / "n1", {"a": 0}, {"listen": "127.0.0.1", "secret": secret})
    thread, events, _ = _listening(receiver)
    with socket.create_connection(("127.0.0.1", events["port"])) as peer:
        peer.sendall(secret.encode() + b"\n[]\n" + data[:1000])
    thread.join(10)
    done = events["done"]
    assert done["complete"] is False and "the hop before closed" in done["error"]
    state = Store(str(tmp_path / "n1")).state("tiny").to_dict()
    assert state["partials"] == {"a": {"size": 1000, "sha256": _sha(data[:1000])}}


def test_verify_names_a_changed_file_and_takes_the_model_out_of_service(tmp_path: Path) -> None:
    top = _model(tmp_path, FILES)
    manifest = _manifest(top)
    store = Store(str(tmp_path / "n1"))
    for rel, data in FILES.items():
        path = Path(store.final("tiny", rel))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    store.present("tiny")  # hashed, as the transfer's own writes are
    store.complete(manifest)
    assert store.listing()[0].changed == () and store.verify("tiny").differ == ()
    with open(store.final("tiny", "config.json"), "r+b") as handle:
        handle.write(b"X")
    assert Store(store.root).listing()[0].changed == ("config.json",)
    found = Store(store.root).verify("tiny")
    assert [d.path for d in found.differ] == ["config.json"]
    assert Store(store.root).manifest("tiny") is None  # not servable until synced again
    with pytest.raises(ModelError, match=r"model tiny is incomplete .*: sync it first"):
        Store(store.root).verify("tiny")
    assert Store(store.root).remove("tiny") and not Store(store.root).remove("tiny")


def test_a_file_of_many_blocks_resumes_mid_block_on_a_source_that_keeps_it_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small blocks: the 3 MiB file crosses in many; the source reads it (it writes its own
    store too), the next node resumes a partial that ends inside a block, the last gets it
    whole; every hop tells its CPU seconds."""
    from halo_cluster.modelstore import sink

    monkeypatch.setattr(sink, "BLOCK", 64 << 10)
    monkeypatch.setattr(sink, "BLOCKS", 3)
    big = "w/model.safetensors"
    top = _model(tmp_path, FILES)
    manifest = _manifest(top)
    store = Store(str(tmp_path / "n1"))
    store.ensure()
    prefix = 100_000  # not a multiple of the block
    partial = Path(store.partial("tiny", big))
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_bytes(FILES[big][:prefix])
    everything = {f.path: 0 for f in manifest.files}
    tail = _spec(manifest, tmp_path / "n2", everything, {})
    middle = _spec(manifest, tmp_path / "n1", {**everything, big: prefix}, {})
    middle["stream"] = tail["stream"]  # the stream starts where the furthest-behind node does
    sent, (e1, e2) = _chain(
        [middle, tail],
        _spec(manifest, tmp_path / "n0", everything, {"files": dict(source_files(str(top))[0])}),
    )
    assert sent["complete"] is True and sent["forwarded"] and sent["cpu_s"] >= 0
    assert e1["done"]["written"] == sum(len(d) for d in FILES.values()) - prefix
    for node, events in (("n0", None), ("n1", e1), ("n2", e2)):
        if events is not None:
            done = events["done"]
            assert (done["complete"], done["failed"]) == (True, {}) and done["cpu_s"] >= 0
        for rel, data in FILES.items():
            assert (tmp_path / node / "tiny" / rel).read_bytes() == data


def test_a_disk_that_hangs_is_left_behind_and_the_chain_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The middle node's writes stop returning: after its idle limit it writes no more (its
    files fail, with why) and forwards on; the node behind it gets everything."""
    from halo_cluster.modelstore import sink
    from halo_cluster.modelstore.store import Receiving

    monkeypatch.setattr(sink, "BLOCK", 64 << 10)
    monkeypatch.setattr(sink, "BLOCKS", 2)
    release = threading.Event()
    put = Receiving.put

    def hang(self: Receiving, chunk: Any) -> None:
        if "/n1/" in self.path:
            release.wait(30)
        put(self, chunk)

    monkeypatch.setattr(Receiving, "put", hang)
    top = _model(tmp_path, FILES)
    manifest = _manifest(top)
    want = {f.path: 0 for f in manifest.files}
    middle = {**_spec(manifest, tmp_path / "n1", want, {}), "idle_s": 1}
    try:
        _sent, (e1, e2) = _chain(
            [middle, _spec(manifest, tmp_path / "n2", want, {})],
            _spec(manifest, None, want, {"files": dict(source_files(str(top))[0])}),
        )
        assert e2["done"]["complete"] is True
        done = e1["done"]
        assert done["complete"] is False and done["forwarded"] is True
        assert set(done["failed"]) == set(FILES)
        assert all("took no data for 1 s" in why for why in done["failed"].values())
    finally:
        release.set()


def test_a_received_file_leaves_the_page_cache_once_it_is_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On unified memory the cache of a copied model takes what the engine's load needs:
    every file a hop verifies is advised out of it, after its fsync."""
    from halo_cluster.modelstore.store import Receiving

    seen: list[tuple[Any, ...]] = []  # other tests' threads may call these too: by fd
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (seen.append(("fsync", fd)), real_fsync(fd))[1])
    monkeypatch.setattr(os, "posix_fadvise", lambda *args: seen.append(("advise", *args)))
    store = Store(str(tmp_path / "n1"))
    store.ensure()
    data = b"w" * 10_000
    receiving = Receiving(store, "tiny", "a", len(data), _sha(data), 0)
    receiving.write(data)
    fd = receiving.handle.fileno()
    receiving.finish()
    mine = [call for call in seen if call[1] == fd]
    assert mine == [("fsync", fd), ("advise", fd, 0, 0, os.POSIX_FADV_DONTNEED)]
    assert (tmp_path / "n1" / "tiny" / "a").read_bytes() == data


def _hanging_sink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, threading.Event]:
    """A sink whose disk takes no write until the event is set (``sink.hanging``: set once
    its first write waits)."""
    from halo_cluster.modelstore.sink import Blocks, Sink
    from halo_cluster.modelstore.store import Receiving

    release, hanging = threading.Event(), threading.Event()
    put = Receiving.put

    def hang(self: Receiving, chunk: Any) -> None:
        hanging.set()
        release.wait(30)
        put(self, chunk)

    monkeypatch.setattr(Receiving, "put", hang)
    store = Store(str(tmp_path / "n1"))
    store.ensure()
    sink = Sink(store, "tiny", {"a": 0}, Blocks(2, 1024), lambda _e: None)
    sink.hanging = hanging
    return sink, release


def test_a_sink_left_behind_that_comes_back_keeps_its_partial_and_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = os.urandom(4096)
    sink, release = _hanging_sink(tmp_path, monkeypatch)
    sink.open("a", len(data), _sha(data))
    for index in range(2):
        block = sink.blocks.take(1)
        assert block is not None
        block[:1024] = data[index * 1024 : (index + 1) * 1024]
        sink.feed(block, 1024, index * 1024)
    assert sink.hanging.wait(10)  # its first write waits on the disk
    sink.abandon(60)
    sink.end()
    release.set()
    assert sink._thread is not None
    sink._queue.put(("stop", None, 0, 0))
    sink._thread.join(10)  # the disk came back: what it wrote stays a partial, unfinished
    sink._hasher.wait()
    sink._finisher.wait()
    partial = Path(Store(str(tmp_path / "n1")).partial("tiny", "a"))
    assert partial.read_bytes() == data[:1024]  # the first block; the rest was never taken
    assert sink.verified == [] and "took no data for 60 s" in sink.failed["a"]


def test_a_disk_that_hangs_on_the_last_blocks_costs_the_idle_limit_not_the_transfer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = os.urandom(1024)
    sink, release = _hanging_sink(tmp_path, monkeypatch)
    try:
        sink.open("a", len(data), _sha(data))
        block = sink.blocks.take(1)
        assert block is not None
        block[:] = data
        sink.feed(block, 1024, 0)
        sink.end()
        sink.close(0.5)  # returns once no block came back for 0.5 s
        assert sink.left_behind and "took no data for 0.5 s" in sink.failed["a"]
    finally:
        release.set()


def test_a_file_cut_short_stays_a_partial_to_resume_from(tmp_path: Path) -> None:
    from halo_cluster.modelstore.store import Receiving

    store = Store(str(tmp_path / "n1"))
    store.ensure()
    data = b"x" * 100
    receiving = Receiving(store, "tiny", "a", len(data), _sha(data), 0)
    receiving.write(data[:40])
    with pytest.raises(ModelError, match="a: 40 of 100 B received"):
        receiving.finish()
    assert Path(receiving.path).read_bytes() == data[:40]
