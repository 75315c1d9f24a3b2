"""llama.cpp's RPC tensor cache kept under its quota: the least recently used files go
first, nothing outside the cache is followed or counted, the node command's answer reads
back, and [serve.llama_cpp] cache_gib is checked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from halo_cluster.errors import ModelError
from halo_cluster.modelstore.rpc_cache import CacheUse, look, parse_cache_use, trim

KIB = 1024


def _cache(store: Path, files: dict[str, tuple[int, float]]) -> Path:
    """Files of the cache: name -> (size, last use as seconds since the epoch)."""
    top = store / ".rpc-cache" / "rpc"
    top.mkdir(parents=True)
    for name, (size, used) in files.items():
        path = top / name
        path.write_bytes(b"t" * size)
        os.utime(path, (used, used))
    return top


def test_the_least_recently_used_go_until_the_quota_holds(tmp_path: Path) -> None:
    top = _cache(tmp_path, {"old": (4 * KIB, 1000), "mid": (4 * KIB, 2000), "new": (4 * KIB, 3000)})
    assert look(str(tmp_path)) == CacheUse(3, 12 * KIB)
    used = trim(str(tmp_path), 9 * KIB)
    assert used == CacheUse(2, 8 * KIB, 1, 4 * KIB, 9 * KIB)
    assert sorted(p.name for p in top.iterdir()) == ["mid", "new"]
    # read since: its last read counts, so the other one goes first
    os.utime(top / "mid", (5000, 2000))
    assert trim(str(tmp_path), 4 * KIB).removed_files == 1
    assert [p.name for p in top.iterdir()] == ["mid"]
    assert trim(str(tmp_path), 4 * KIB).removed_files == 0  # within the quota: nothing goes


def test_a_quota_of_zero_empties_it_and_a_link_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "precious"
    outside.write_bytes(b"p" * (64 * KIB))
    store = tmp_path / "store"
    top = _cache(store, {"a": (KIB, 1000)})
    (top / "elsewhere").symlink_to(outside)
    assert look(str(store)).bytes == KIB  # the link's target is not the cache's
    assert trim(str(store), KIB).removed_files == 0
    emptied = trim(str(store), 0)
    assert (emptied.files, emptied.bytes, emptied.removed_bytes) == (0, 0, KIB)
    assert list(top.iterdir()) == [] and outside.read_bytes() == b"p" * (64 * KIB)


def test_no_cache_is_an_empty_one_and_a_link_in_its_place_is_refused(tmp_path: Path) -> None:
    assert trim(str(tmp_path), 0) == CacheUse(quota_bytes=0)
    (tmp_path / "target").mkdir()
    (tmp_path / ".rpc-cache").symlink_to(tmp_path / "target")
    with pytest.raises(ModelError, match=r"not a directory .* never follows it"):
        look(str(tmp_path))
    with pytest.raises(ModelError, match="give 0 or more"):
        trim(str(tmp_path), -1)


def test_the_node_command_answers_what_it_kept_and_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from halo_cluster.node.main import main

    _cache(tmp_path, {"a": (KIB, 1000), "b": (KIB, 2000)})
    assert main(["rpc-cache", "--store", str(tmp_path), "--quota-bytes", "1024"]) == 0
    told = parse_cache_use(json.loads(capsys.readouterr().out))
    assert told == CacheUse(1, KIB, 1, KIB, KIB)
    assert main(["rpc-cache", "--store", str(tmp_path)]) == 0  # only a look
    assert parse_cache_use(json.loads(capsys.readouterr().out)) == CacheUse(1, KIB)
    with pytest.raises(SystemExit) as refused:
        main(["rpc-cache", "--store", str(tmp_path), "--quota-bytes", "-1"])
    assert refused.value.code == 2 and "-1 is below 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "message"),
    [(-1, "from 0 to"), ("64", "must be a number"), (True, "must be a number")],
)
def test_cache_gib_is_a_size(tmp_path: Path, value: object, message: str) -> None:
    from halo_cluster.config.section import Section
    from halo_cluster.engines.llama_cpp_argv import LlamaCppOptions
    from halo_cluster.errors import ConfigError

    assert LlamaCppOptions.from_section(None).cache_gib == 64.0
    assert (
        LlamaCppOptions.from_section(Section(tmp_path, "llama_cpp", {"cache_gib": 0.5})).cache_bytes
        == 1 << 29
    )
    with pytest.raises(ConfigError, match=message):
        LlamaCppOptions.from_section(Section(tmp_path, "llama_cpp", {"cache_gib": value}))
