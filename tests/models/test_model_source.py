"""Where a model comes from: the local Hugging Face cache (read through huggingface_hub's
cache API, a cache laid out as the hub writes it), a repo id that is not cached and cannot
be downloaded here (one line, no traceback), and sources that are not there at all."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import halo

pytest.importorskip("huggingface_hub")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _hub_cache(top: Path, repo: str, files: dict[str, bytes]) -> Path:
    """A cache as huggingface_hub writes one: blobs by hash, a snapshot of links, refs/main."""
    folder = top / ("models--" + repo.replace("/", "--"))
    (folder / "blobs").mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(COMMIT)
    snapshot = folder / "snapshots" / COMMIT
    for rel, data in files.items():
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return top


def _resolve(cache: Path, text: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    code = (
        "import json, sys\n"
        "from halo_cluster.models.source import _hugging_face\n"
        "from halo_cluster.errors import HaloError\n"
        "try:\n"
        f"    s = _hugging_face({text!r}, None, None)\n"
        "except HaloError as err:\n"
        "    print(err, file=sys.stderr); sys.exit(1)\n"
        "print(json.dumps({'label': s.label, 'manifest': s.manifest.to_dict(), 'files': s.files,\n"
        "                  'left_out': list(s.left_out)}))\n"
    )
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "XDG_CACHE_HOME": str(tmp / "xdg")}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )


def test_a_model_in_the_hugging_face_cache_is_read_through_its_api(tmp_path: Path) -> None:
    files = {"config.json": b'{"a": 1}', "model.safetensors": b"weights" * 100}
    cache = _hub_cache(tmp_path / "hub", "org/tiny", files)
    done = _resolve(cache, "org/tiny", tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["label"] == f"hf:org/tiny@{COMMIT}"
    manifest = data["manifest"]
    assert (manifest["name"], manifest["entry"]) == ("tiny", "")
    assert manifest["files"] == [
        {"path": rel, "size": len(body), "sha256": hashlib.sha256(body).hexdigest()}
        for rel, body in sorted(files.items())
    ]
    # the bytes are read from the blobs the snapshot's links point to
    assert all("/blobs/" in path for path in data["files"].values())


def test_a_gguf_repo_names_its_model_file_as_the_entry(tmp_path: Path) -> None:
    files = {"README.md": b"x", "tiny-Q8_0.gguf": b"GGUF" + b"\0" * 64}
    cache = _hub_cache(tmp_path / "hub", "org/tiny-GGUF", files)
    data = json.loads(_resolve(cache, "org/tiny-GGUF", tmp_path).stdout)
    assert data["manifest"]["entry"] == "tiny-Q8_0.gguf"


def test_a_repo_not_cached_and_not_reachable_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "hub").mkdir()
    done = _resolve(tmp_path / "hub", "org/not-here", tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    line = done.stderr.strip()
    assert "\n" not in line
    assert line.startswith(
        "org/not-here: not in the local Hugging Face cache and not downloadable here ("
    )
    assert line.endswith(
        "download it where the hub is reachable ('hf download org/not-here') or give the "
        "model's directory"
    )


def test_the_cli_says_what_a_source_is_not(tmp_path: Path) -> None:
    config = tmp_path / "halo.toml"
    config.write_text('[[node]]\nname = "n1"\nssh = "n1.invalid"\n')
    done = halo("model", "sync", "nowhere", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "halo: error: nowhere: no such file or directory here; give a path, NODE:PATH or a "
        "Hugging Face repo id (org/name)"
    )
    other = halo("model", "sync", "n9:/m", "--config", str(config), cwd=tmp_path)
    assert other.stderr.strip().splitlines()[-1] == (
        f"halo: error: n9:/m: no such file or directory here (n9 is not a node of {config}); "
        "give a path, NODE:PATH or a Hugging Face repo id (org/name)"
    )
    bad = halo("model", "verify", "../x", "--config", str(config), cwd=tmp_path)
    assert bad.returncode == 1 and "model name '../x'" in bad.stderr


def test_the_name_a_path_gets_is_known_before_it_is_hashed(tmp_path: Path) -> None:
    """What 'halo model sync' asks the nodes about while the source is hashed: the name of
    a path here or on a node; nothing for a Hugging Face id or a path that is not there."""
    from types import SimpleNamespace

    from halo_cluster.models.source import expected_name

    cluster = SimpleNamespace(config=SimpleNamespace(nodes=[SimpleNamespace(name="node1")]))
    shard = tmp_path / "Big Model-00001-of-00003.gguf"
    shard.write_bytes(b"GGUF")
    assert expected_name(cluster, str(shard)) == "Big-Model"  # type: ignore[arg-type]
    assert expected_name(cluster, "node1:/models/qwen3/") == "qwen3"  # type: ignore[arg-type]
    assert expected_name(cluster, "Qwen/Qwen3-8B") is None  # type: ignore[arg-type]
    assert expected_name(cluster, "nodeX:/models/qwen3") is None  # type: ignore[arg-type]
