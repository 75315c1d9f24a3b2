"""The gateway's key store and usage file (gateway/keys.py): keys made, listed, revoked and
made again under a revoked name; only hashes on disk, 0600; bad names and garbage files are
one line; the usage file reads back what was written."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from halo_cluster.errors import StateError, UsageError
from halo_cluster.gateway.keys import (
    KEY_PREFIX,
    KeyFile,
    KeyRecord,
    KeyUsage,
    UsageFile,
    active_hashes,
    add_key,
    hash_key,
    parse_keys,
    parse_usage,
    read_keys,
    read_usage,
    revoke_key,
    write_usage,
)

pytestmark = pytest.mark.unit


def test_add_list_revoke_and_reuse(tmp_path: Path) -> None:
    path = tmp_path / "state" / "keys.json"
    alice = add_key(path, "alice", 100.0)
    bob = add_key(path, "bob", 101.0)
    assert alice.startswith(KEY_PREFIX) and len(alice) > 40 and alice != bob
    assert read_keys(path) == KeyFile(
        (KeyRecord("alice", hash_key(alice), 100.0), KeyRecord("bob", hash_key(bob), 101.0))
    )
    assert active_hashes(read_keys(path)) == {hash_key(alice): "alice", hash_key(bob): "bob"}

    assert revoke_key(path, "alice", 200.0) == KeyRecord("alice", hash_key(alice), 100.0, 200.0)
    assert active_hashes(read_keys(path)) == {hash_key(bob): "bob"}

    again = add_key(path, "alice", 300.0)
    assert read_keys(path).keys == (
        KeyRecord("alice", hash_key(alice), 100.0, 200.0),
        KeyRecord("bob", hash_key(bob), 101.0),
        KeyRecord("alice", hash_key(again), 300.0),
    )
    assert active_hashes(read_keys(path)) == {hash_key(bob): "bob", hash_key(again): "alice"}


def test_an_active_name_is_refused_and_so_is_revoking_none(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    add_key(path, "alice", 1.0)
    with pytest.raises(UsageError, match=r"^a key named alice exists: revoke it first$"):
        add_key(path, "alice", 2.0)
    with pytest.raises(UsageError, match="no active key named 'carol'"):
        revoke_key(path, "carol", 2.0)
    revoke_key(path, "alice", 2.0)
    with pytest.raises(UsageError, match="no active key named 'alice'"):
        revoke_key(path, "alice", 3.0)


def test_only_the_hash_on_disk_mode_0600_dir_0700(tmp_path: Path) -> None:
    path = tmp_path / "new-dir" / "keys.json"
    key = add_key(path, "alice", 1.0)
    text = path.read_text()
    assert key not in text and key[len(KEY_PREFIX) :] not in text
    assert hash_key(key) in text
    assert json.loads(text)["schema"] == "halo.gateway_keys/1"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) & 0o077 == 0
    assert [p.name for p in path.parent.iterdir()] == ["keys.json"]  # no temporary file left


def test_no_key_in_a_repr(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    key = add_key(path, "alice", 1.0)
    assert key not in repr(read_keys(path))
    with pytest.raises(UsageError) as refused:
        add_key(path, "alice", 2.0)
    assert key not in str(refused.value)


@pytest.mark.parametrize(
    "name", ["", "a" * 65, "has space", "slash/name", "ünïcode", "new\nline", "semi;colon"]
)
def test_bad_names_are_one_line(tmp_path: Path, name: str) -> None:
    with pytest.raises(UsageError) as refused:
        add_key(tmp_path / "keys.json", name, 1.0)
    message = str(refused.value)
    assert "\n" not in message and "cannot name a key" in message
    assert not (tmp_path / "keys.json").exists()


@pytest.mark.parametrize("name", ["a", "a" * 64, "Team.ci_bot-2"])
def test_good_names(tmp_path: Path, name: str) -> None:
    add_key(tmp_path / "keys.json", name, 1.0)
    assert read_keys(tmp_path / "keys.json").keys[0].name == name


def test_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_keys(tmp_path / "none.json") == KeyFile()
    assert read_usage(tmp_path / "none.json") == UsageFile()


GOOD = "a" * 64
GARBAGE = [
    ("", "not JSON"),
    ("{", "not JSON"),
    ("[]", "not a JSON object"),
    ('{"schema": "halo.other/1", "keys": []}', "its schema is 'halo.other/1'"),
    ('{"schema": "halo.gateway_keys/1"}', "'keys' is not a list"),
    ('{"schema": "halo.gateway_keys/1", "keys": [1]}', "a key that is not an object"),
    (
        '{"schema": "halo.gateway_keys/1", "keys": [{"name": "a", "sha256": "xyz", "created": 1}]}',
        "no SHA-256 of 64 hex digits",
    ),
    (
        f'{{"schema": "halo.gateway_keys/1", "keys": [{{"name": "a b", "sha256": "{GOOD}", "created": 1}}]}}',
        "'a b' is not a key name",
    ),
    (
        f'{{"schema": "halo.gateway_keys/1", "keys": [{{"name": "a", "sha256": "{GOOD}", "created": "x"}}]}}',
        "created is not a time",
    ),
    (
        f'{{"schema": "halo.gateway_keys/1", "keys": [{{"name": "a", "sha256": "{GOOD}", "created": 1}},'
        f' {{"name": "a", "sha256": "{"b" * 64}", "created": 2}}]}}',
        "two active keys named a",
    ),
]


@pytest.mark.parametrize(("text", "reason"), GARBAGE)
def test_garbage_key_file_is_one_line(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "keys.json"
    path.write_text(text)
    with pytest.raises(StateError) as bad:
        read_keys(path)
    message = str(bad.value)
    assert "\n" not in message and reason in message
    assert message.startswith(f"{path}: not a halo.gateway_keys/1 key file")
    assert "remove it" in message  # and says what to do
    with pytest.raises(StateError):
        add_key(path, "b", 1.0)  # nothing is written over a file halo cannot read
    assert path.read_text() == text


def test_a_directory_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="a directory, not a regular file"):
        read_keys(tmp_path)


def test_usage_round_trip(tmp_path: Path) -> None:
    usage = UsageFile(
        {"bob": KeyUsage(3, 1, 20, 40), "alice": KeyUsage(requests=1)}, anonymous_refused=7
    )
    path = tmp_path / "state" / "usage.json"
    write_usage(path, usage)
    assert read_usage(path) == usage
    assert parse_usage(usage.to_json()) == usage
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {
        "schema": "halo.gateway_usage/1",
        "keys": {
            "alice": {"requests": 1, "refused": 0, "prompt_tokens": 0, "completion_tokens": 0},
            "bob": {"requests": 3, "refused": 1, "prompt_tokens": 20, "completion_tokens": 40},
        },
        "anonymous_refused": 7,
    }


def test_keys_round_trip() -> None:
    keys = KeyFile((KeyRecord("a", GOOD, 1.5), KeyRecord("b", "b" * 64, 2.0, 3.0)))
    assert parse_keys(keys.to_json()) == keys


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("null", "not a JSON object"),
        (
            '{"schema": "halo.gateway_usage/1", "keys": [], "anonymous_refused": 0}',
            "'keys' is not an object",
        ),
        (
            '{"schema": "halo.gateway_usage/1", "keys": {}, "anonymous_refused": -1}',
            "anonymous_refused is not a count",
        ),
        (
            '{"schema": "halo.gateway_usage/1", "keys": {"a": {"requests": 1.5}}, "anonymous_refused": 0}',
            "requests is not a count",
        ),
        (
            '{"schema": "halo.gateway_usage/1", "keys": {"a": {"requests": true}}, "anonymous_refused": 0}',
            "requests is not a count",
        ),
    ],
)
def test_garbage_usage_is_one_line(text: str, reason: str) -> None:
    with pytest.raises(StateError) as bad:
        parse_usage(text, "usage.json")
    assert "\n" not in str(bad.value) and reason in str(bad.value)
    assert str(bad.value).startswith("usage.json: not a halo.gateway_usage/1 usage file")
