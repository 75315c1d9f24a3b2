"""Hardening: the model store never touches anything outside itself. A link where a model's
directory (or a directory inside it) should be is never followed by sync, state, verify or
list; a directory where a manifest should be is an incomplete model, not a traceback. And
the other files halo writes that others read: a member's authorized_keys replaced by a
rename (never rewritten in place), results saved under names of their own."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from halo_cluster.client.node import clients_from
from halo_cluster.cluster.handle import Cluster
from halo_cluster.config import Config, NodeConfig
from halo_cluster.config.model import ModelsConfig
from halo_cluster.errors import ModelError
from halo_cluster.models.source import resolve_source
from halo_cluster.models.sync import Sync
from halo_cluster.modelstore.manifest import HashCache, Manifest, make_manifest, source_files
from halo_cluster.modelstore.pipe import relay
from halo_cluster.modelstore.store import Store
from halo_cluster.modelstore.transfer import PipeSpec, StreamFile
from halo_cluster.node.main import main as node_main
from halo_cluster.runner.local import LocalRunner
from halo_cluster.runner.result import LineSink, Result

HALO = str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "halo")


def _source(tmp: Path) -> Path:
    top = tmp / "src"
    (top / "w").mkdir(parents=True)
    (top / "config.json").write_text('{"a": 1}')
    (top / "w" / "model.safetensors").write_bytes(b"weights" * 100)
    return top


def _victim(tmp: Path) -> Path:
    """A directory outside the store that a link in it points to: nothing may change it."""
    victim = tmp / "victim"
    (victim / "w").mkdir(parents=True)
    (victim / "precious.txt").write_text("keep me")
    (victim / "w" / "precious.bin").write_bytes(b"keep me too")
    return victim


def _tree(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*")) if p.is_file()}


def _manifest(top: Path, name: str = "m") -> tuple[Manifest, dict[str, str]]:
    files, entry = source_files(str(top))
    return make_manifest(name, files, entry, str(top), HashCache(None)), dict(files)


def _receive(store: Path, top: Path, name: str = "m") -> dict[str, object]:
    """One hop that reads the source's files and writes them into ``store`` (as the first
    node of a chain whose source is that node)."""
    manifest, files = _manifest(top, name)
    stream = tuple(StreamFile(f.path, f.size, f.sha256, 0) for f in manifest.files)
    spec = PipeSpec(
        "run1", str(store), True, manifest, stream, {f.path: 0 for f in manifest.files},
        files=files,
    )  # fmt: skip
    return relay(spec, lambda _event: None).to_dict()


# -- the model's directory is a link --------------------------------------------------------
def test_sync_never_deletes_or_writes_through_a_linked_model_directory(tmp_path: Path) -> None:
    """`halo model sync --name m` over a store whose `m` links elsewhere: the node fails in
    one line naming the link, and the link's target is as it was (no file removed, none
    written), where it used to lose every file not in the new manifest."""
    victim = _victim(tmp_path)
    before = _tree(victim)
    store = tmp_path / "store"
    store.mkdir()
    (store / "m").symlink_to(victim)
    done = _receive(store, _source(tmp_path))
    assert done["complete"] is False
    assert str(done["error"]).startswith(f"{store / 'm'}: a link to {victim}, not a directory")
    assert "\n" not in str(done["error"])
    assert _tree(victim) == before and not (victim / ".halo").exists()
    assert (store / "m").is_symlink()


def test_the_whole_sync_reports_the_node_failed_and_exits_not_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's sync over a real node command (this machine as node n1): failed,
    with the reason, and the link's target untouched."""
    victim = _victim(tmp_path)
    before = _tree(victim)
    store = tmp_path / "store"
    store.mkdir()
    (store / "m").symlink_to(victim)
    monkeypatch.setenv("SSH_CONNECTION", "127.0.0.1 40000 127.0.0.1 22")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    node = NodeConfig("n1", "n1.invalid", None, halo=HALO)
    config = Config(tmp_path / "halo.toml", "c", "auto", (node,), models=ModelsConfig(str(store)))
    cluster = Cluster(config, clients_from(config, {"n1": LocalRunner()}))
    source = resolve_source(cluster, str(_source(tmp_path)), "m")
    result = Sync(cluster, source, ["n1"]).run()
    assert not result.ok
    row = result.nodes["n1"]
    assert row.status != "synced" and "a link to" in str(row.reason)
    assert _tree(victim) == before


def test_state_verify_and_list_never_read_through_a_linked_model(tmp_path: Path) -> None:
    """model-state used to hash every file of the link's target, model-verify to read it,
    model-list to take its manifest for the store's: each refuses, or lists it incomplete."""
    victim = _victim(tmp_path)
    here = Store(str(tmp_path / "other"))
    top = _source(tmp_path)
    assert _receive(Path(here.root), top, "real")["complete"] is True
    os.rename(Path(here.root) / "real", victim / "inner")  # a complete model, out of the store
    store = tmp_path / "store"
    store.mkdir()
    (store / "m").symlink_to(victim / "inner")
    linked = Store(str(store))
    with pytest.raises(ModelError, match=r"/m: a link to .*inner, not a directory halo made"):
        linked.state("m")
    with pytest.raises(ModelError, match=r"/m: a link to .*inner, not a directory halo made"):
        linked.verify("m")
    assert [(m.name, m.complete, m.digest) for m in linked.listing()] == [("m", False, None)]
    assert not (store / ".halo-hashes.json").exists()  # nothing of the target was hashed
    assert (victim / "inner" / ".halo" / "manifest.json").exists()  # verify took nothing out


@pytest.mark.parametrize("command", ["model-state", "model-verify"])
def test_the_node_commands_say_so_in_one_line(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = _victim(tmp_path)
    store = tmp_path / "store"
    store.mkdir()
    (store / "m").symlink_to(victim)
    assert node_main([command, "--store", str(store), "m"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a link to" in err and "Traceback" not in err


# -- a linked directory inside the model ----------------------------------------------------
def test_no_write_lands_through_a_linked_subdirectory(tmp_path: Path) -> None:
    """The model's `w` (where `w/model.safetensors` goes) is a link out of the store: the
    file is not written there; the node fails that file in one line; the target is as it was."""
    victim = _victim(tmp_path)
    before = _tree(victim)
    store = tmp_path / "store"
    (store / "m").mkdir(parents=True)
    (store / "m" / "w").symlink_to(victim / "w")
    done = _receive(store, _source(tmp_path))
    assert done["complete"] is False
    failed = done["failed"]
    assert isinstance(failed, dict) and list(failed) == ["w/model.safetensors"]
    assert "a link to" in failed["w/model.safetensors"]
    assert _tree(victim) == before


def test_a_linked_halo_directory_takes_no_partial_and_no_manifest(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    before = _tree(victim)
    store = tmp_path / "store"
    (store / "m").mkdir(parents=True)
    (store / "m" / ".halo").symlink_to(victim)
    done = _receive(store, _source(tmp_path))
    assert done["complete"] is False and "/m/.halo: a link to" in str(done["error"])
    assert _tree(victim) == before


def test_a_stray_linked_directory_is_removed_as_a_link_its_target_kept(tmp_path: Path) -> None:
    """A link in the model's directory that no file of the manifest goes through: the sync
    removes the link itself (as it removes any file the manifest does not name)."""
    victim = _victim(tmp_path)
    before = _tree(victim)
    store = tmp_path / "store"
    (store / "m").mkdir(parents=True)
    (store / "m" / "extra").symlink_to(victim)
    assert _receive(store, _source(tmp_path))["complete"] is True
    assert not os.path.lexists(store / "m" / "extra") and _tree(victim) == before


# -- a directory where a manifest should be ------------------------------------------------
def test_a_directory_in_the_manifests_place_is_an_incomplete_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    (store / "d" / ".halo" / "manifest.json").mkdir(parents=True)
    assert Store(str(store)).manifest("d") is None
    assert node_main(["model-list", "--store", str(store)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(m["name"], m["complete"]) for m in listed["models"]] == [("d", False)]


# -- authorized_keys -------------------------------------------------------------------------
def _run_script(script: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    return subprocess.run(
        ["bash", "-s"], input=script, capture_output=True, text=True, env=env, check=False
    )


class _Recorder:
    """A member that records the script it is sent (and runs it in a HOME of the test's)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.scripts: list[str] = []

    def run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        timeout: float = 30.0,
        on_line: LineSink | None = None,
    ) -> Result:
        self.scripts.append(stdin or "")
        done = _run_script(stdin or "", self.home)
        return Result(tuple(argv), done.returncode, done.stdout, done.stderr)


def _members(tmp_path: Path) -> tuple[Cluster, _Recorder]:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    nodes = (NodeConfig("head", "head.invalid", None), NodeConfig("m1", "m1.invalid", None))
    config = Config(tmp_path / "halo.toml", "c", "auto", nodes)
    member = _Recorder(home)
    head = _Recorder(tmp_path / "head-home")
    return Cluster(config, clients_from(config, {"head": head, "m1": member})), member


OTHER_KEYS = "".join(f"ssh-ed25519 AAAA{i:04d} someone@else\n" for i in range(200))


@pytest.mark.parametrize("step", ["authorize", "forget"])
def test_authorized_keys_is_replaced_by_a_rename_never_rewritten_in_place(
    tmp_path: Path, step: str
) -> None:
    """A kill while the file is rewritten in place (`cat new > file`) left half the keys: the
    new content goes to a temporary file beside it, then one rename, so the file is always
    the old keys or the new ones. The file's inode changes (it was renamed over), every other
    key is there, and no temporary file is left."""
    from halo_cluster.supervise import control

    cluster, member = _members(tmp_path)
    keys = member.home / ".ssh" / "authorized_keys"
    tag = control.key_tag(cluster)
    keys.write_text(OTHER_KEYS + f"ssh-ed25519 OLD {tag}\n")
    keys.chmod(0o600)
    inode = keys.stat().st_ino
    if step == "authorize":
        control._authorize(cluster, cluster.config.node("m1"), f"ssh-ed25519 NEW {tag}")
    else:
        control.forget(cluster)
    text = keys.read_text()
    assert text.startswith(OTHER_KEYS) and "OLD" not in text
    assert ("NEW" in text) == (step == "authorize")
    assert keys.stat().st_ino != inode
    assert (keys.stat().st_mode & 0o777) == 0o600
    assert sorted(p.name for p in keys.parent.iterdir()) == ["authorized_keys"]
    script = member.scripts[-1]
    assert '> "$f"' not in script and "cat " not in script


def test_authorized_keys_through_a_link_keeps_the_link(tmp_path: Path) -> None:
    """A member whose authorized_keys is a link (managed elsewhere): the file it leads to
    is replaced, the link stays a link."""
    from halo_cluster.supervise import control

    cluster, member = _members(tmp_path)
    real = member.home / "managed_keys"
    real.write_text(OTHER_KEYS)
    keys = member.home / ".ssh" / "authorized_keys"
    keys.symlink_to(real)
    tag = control.key_tag(cluster)
    control._authorize(cluster, cluster.config.node("m1"), f"ssh-ed25519 NEW {tag}")
    assert keys.is_symlink() and real.read_text() == OTHER_KEYS + f"ssh-ed25519 NEW {tag}\n"


# -- results saved at once -------------------------------------------------------------------
def test_results_saved_in_the_same_second_each_keep_a_file_of_their_own(tmp_path: Path) -> None:
    """Four `bench serve` runs ending together printed "saved" four times over two files:
    each save takes a name of its own, exclusively, and every result is there."""
    from halo_cluster.bench import results

    directory = tmp_path / "results"
    saved: list[Path] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def one(index: int) -> None:
        start.wait()
        path = results.save({"schema": "halo.bench.net/1", "run": index}, None, directory, "net")
        with lock:
            saved.append(path)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(saved)) == 8
    assert sorted(json.loads(p.read_text())["run"] for p in saved) == list(range(8))
    assert sorted(p.name for p in directory.iterdir()) == sorted(p.name for p in saved)
    assert all(p.name.startswith("net-") and p.suffix == ".json" for p in saved)
