"""The node side of ``halo model``: this node's store, a source on this node hashed into a
manifest, and one hop of a transfer (``modelstore``). Each prints JSON for the controller."""

from __future__ import annotations

import json
import os
import sys
import threading

from halo_cluster.errors import ModelError, UsageError
from halo_cluster.jsonout import emit_json
from halo_cluster.modelstore.answers import Listing, Removed
from halo_cluster.modelstore.manifest import (
    HashCache,
    default_name,
    make_manifest,
    prefix_sha256,
    source_files,
)
from halo_cluster.modelstore.rpc_cache import look
from halo_cluster.modelstore.store import HASHES, Store
from halo_cluster.modelstore.transfer import HashAnswer, PipeEvent, parse_pipe_spec

MAX_SPEC = 64 << 20


def hash_source(store: str, path: str, name: str, prefixes: list[str]) -> HashAnswer:
    """The manifest of the model at ``path`` on this node (hashes kept in the store's cache),
    and the sha256 of the prefixes asked for (a partial elsewhere, checked before it resumes)."""
    files, entry = source_files(path)
    cache = HashCache(os.path.join(os.path.abspath(os.path.expanduser(store)), HASHES))
    where = os.path.abspath(path)
    manifest = make_manifest(name or default_name(path), files, entry, where, cache)
    real = dict(files)
    asked: dict[str, dict[int, str]] = {}
    for item in prefixes:
        rel, _, size_text = item.rpartition(":")
        if rel not in real or not size_text.isdigit():
            raise UsageError(f"--prefix {item!r}: use REL:SIZE for a file of the model")
        size = int(size_text)
        asked.setdefault(rel, {})[size] = prefix_sha256(real[rel], size)
    return HashAnswer(manifest, real, asked)


def pipe(spec_text: str) -> int:
    """One hop (its spec from the environment); every event a JSON line on stdout. Exit 0
    when this hop did all it was asked, 1 otherwise (the ``done`` line says what failed)."""
    if not spec_text or len(spec_text) > MAX_SPEC:
        raise UsageError("model-pipe: no spec (halo sends it in the environment)")
    try:
        spec = parse_pipe_spec(spec_text)
    except ModelError as err:
        raise UsageError(f"model-pipe: a malformed spec ({err})") from None

    lock = threading.Lock()  # the hop's file finisher emits from its own thread

    def emit(event: PipeEvent) -> None:
        with lock:
            sys.stdout.write(json.dumps(event.to_dict()) + "\n")
            sys.stdout.flush()

    from halo_cluster.modelstore.pipe import relay  # a hop's code: only where one runs

    return 0 if relay(spec, emit).ok else 1


def stop(run_id: str) -> list[int]:
    """End this user's hops of transfer ``run_id`` (a controller's Ctrl-C): the processes
    whose environment holds that run's spec. Returns their pids."""
    import signal

    if not run_id.isalnum() or len(run_id) > 64:
        raise UsageError(f"model-stop: {run_id[:40]!r} is not a run id")
    marker = f'"run": "{run_id}"'.encode()
    stopped = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read(1 << 24)
        except OSError:
            continue
        if b"HALO_MODEL_SPEC=" in environ and marker in environ:
            try:
                os.kill(int(entry), signal.SIGTERM)
                stopped.append(int(entry))
            except OSError:
                pass
    return stopped


def run(command: str, store: str, name: str = "") -> None:
    """model-list, model-state, model-verify, model-rm: their answer on stdout."""
    here = Store(store)
    if command == "model-list":
        try:
            cache = look(store)
        except ModelError:  # a link or a file in its place: the models are listed all the same
            cache = None
        emit_json(Listing(here.root, tuple(here.listing()), cache).to_dict())
    elif command == "model-state":
        emit_json(here.state(name).to_dict())
    elif command == "model-verify":
        emit_json(here.verify(name).to_dict())
    elif command == "model-rm":
        emit_json(Removed(name, here.remove(name)).to_dict())
    else:  # pragma: no cover - the dispatcher names only these
        raise ModelError(f"{command}: not a model command")
