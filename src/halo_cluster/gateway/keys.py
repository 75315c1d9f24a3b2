"""The gateway's API keys, as the controller stores them, and the gate's usage counts.

A key is ``"halo-" + secrets.token_urlsafe(32)``: 256 random bits. Only its SHA-256 (hex) is
ever stored; ``add_key`` returns the key itself, the one time it exists in clear. A plain,
unsalted SHA-256 is enough here: salts and slow hashes protect passwords people choose,
which can be guessed; a key of 256 random bits cannot be found from its hash by guessing,
however fast each guess is. No repr, exception or log line holds a key, only its name.

The key file (``halo.gateway_keys/1``) lists every key ever made, a revoked one marked with
the second it was revoked, so a name whose key was revoked may be given a new one. Both files
live in the cluster's state directory (the caller names the path): written atomically, mode
0600, the directory made 0700 when it is missing. The usage file (``halo.gateway_usage/1``)
is written by the gate (gate.py) and read by whoever reports it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from halo_cluster.atomic import atomic_write
from halo_cluster.bounded.infile import read_text
from halo_cluster.bounded.jsonin import loads
from halo_cluster.errors import StateError, UsageError
from halo_cluster.jsonout import JsonObject

KEYS_SCHEMA = "halo.gateway_keys/1"
USAGE_SCHEMA = "halo.gateway_usage/1"
KEY_PREFIX = "halo-"
MAX_FILE_BYTES = 1 << 20
FILE_MODE = 0o600
DIR_MODE = 0o700
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
# a new key's name starts with a letter or digit: '-x' reads as an option, '.' and '..' as
# directories (names in key files written before are read as they are)
_NEW_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_COUNTS = ("requests", "refused", "prompt_tokens", "completion_tokens")


@dataclass(frozen=True)
class KeyRecord:
    """One key as stored: its name, its hash, when it was made and (if so) revoked."""

    name: str
    sha256: str
    created: float
    revoked: float | None = None

    @property
    def active(self) -> bool:
        return self.revoked is None

    def to_dict(self) -> JsonObject:
        return {
            "name": self.name,
            "sha256": self.sha256,
            "created": self.created,
            "revoked": self.revoked,
        }


@dataclass(frozen=True)
class KeyFile:
    """Every key ever made, in the order they were made."""

    keys: tuple[KeyRecord, ...] = ()

    def active(self, name: str) -> KeyRecord | None:
        """The active key of ``name``, or None."""
        return next((key for key in self.keys if key.name == name and key.active), None)

    def to_json(self) -> str:
        keys = [key.to_dict() for key in self.keys]
        return _dump({"schema": KEYS_SCHEMA, "keys": keys})


@dataclass(frozen=True)
class KeyUsage:
    """What one key's holder did through the gate. ``refused``: requests of the key that the
    gate answered itself with an error (a body too large, an upstream out of reach)."""

    requests: int = 0
    refused: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def plus(self, other: KeyUsage) -> KeyUsage:
        return KeyUsage(*(getattr(self, name) + getattr(other, name) for name in _COUNTS))


@dataclass(frozen=True)
class UsageFile:
    """The gate's counts: per key name, and the requests refused for want of a valid key."""

    keys: Mapping[str, KeyUsage] = field(default_factory=dict)
    anonymous_refused: int = 0

    def to_json(self) -> str:
        keys = {
            name: {count: getattr(usage, count) for count in _COUNTS}
            for name, usage in sorted(self.keys.items())
        }
        return _dump(
            {"schema": USAGE_SCHEMA, "keys": keys, "anonymous_refused": self.anonymous_refused}
        )


def hash_key(key: str) -> str:
    """The SHA-256 (hex) of ``key``, as the key file stores it."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def active_hashes(keyfile: KeyFile) -> dict[str, str]:
    """sha256 -> name of every key not revoked."""
    return {key.sha256: key.name for key in keyfile.keys if key.active}


def check_name(name: str) -> str:
    """``name`` when it can name a key; UsageError (one line) otherwise."""
    if not _NEW_NAME.fullmatch(name):
        raise UsageError(
            f"{name[:80]!r} cannot name a key: use 1 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def add_key(path: Path, name: str, now: float) -> str:
    """A new key named ``name``, its hash added to the key file at ``path``; the key itself is
    returned, the only time it exists in clear. UsageError when ``name`` has an active key."""
    keyfile = read_keys(path)
    if keyfile.active(check_name(name)) is not None:
        raise UsageError(f"a key named {name} exists: revoke it first")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    record = KeyRecord(name, hash_key(key), float(now))
    _write(path, KeyFile((*keyfile.keys, record)).to_json())
    return key


def revoke_key(path: Path, name: str, now: float) -> KeyRecord:
    """The active key of ``name``, marked revoked at ``now`` in the key file; UsageError
    when there is none."""
    keyfile = read_keys(path)
    found = keyfile.active(name)
    if found is None:
        raise UsageError(f"no active key named {name[:80]!r} in {path}")
    revoked = replace(found, revoked=float(now))
    _write(path, KeyFile(tuple(revoked if key is found else key for key in keyfile.keys)).to_json())
    return revoked


def read_keys(path: Path) -> KeyFile:
    """The key file at ``path`` (an empty one when there is none); StateError on garbage."""
    if not os.path.lexists(path):
        return KeyFile()
    return parse_keys(read_text(path, MAX_FILE_BYTES, "a halo key file", StateError), str(path))


def parse_keys(text: str, where: str = "the key file") -> KeyFile:
    """A key file's content; StateError (one line) when it is not a halo.gateway_keys/1 file."""
    try:
        data = _document(text, KEYS_SCHEMA)
        keyfile = KeyFile(tuple(_record(item) for item in _list(data, "keys")))
        _one_active_each(keyfile)
        return keyfile
    except ValueError as err:
        raise StateError(
            f"{where}: not a {KEYS_SCHEMA} key file halo can read ({err}): "
            "restore it from a copy, or remove it and make the keys again"
        ) from None


def read_usage(path: Path) -> UsageFile:
    """The usage file at ``path`` (an empty one when there is none); StateError on garbage."""
    if not os.path.lexists(path):
        return UsageFile()
    return parse_usage(read_text(path, MAX_FILE_BYTES, "a halo usage file", StateError), str(path))


def parse_usage(text: str, where: str = "the usage file") -> UsageFile:
    """A usage file's content; StateError (one line) when it is not a halo.gateway_usage/1 file."""
    try:
        data = _document(text, USAGE_SCHEMA)
        keys = data.get("keys")
        if not isinstance(keys, dict):
            raise ValueError("'keys' is not an object")
        usage = {_name(name): _usage(counts) for name, counts in keys.items()}
        return UsageFile(usage, _count(data.get("anonymous_refused"), "anonymous_refused"))
    except ValueError as err:
        raise StateError(
            f"{where}: not a {USAGE_SCHEMA} usage file halo can read ({err}): "
            "remove it to count from zero"
        ) from None


def write_usage(path: Path, usage: UsageFile) -> None:
    """``usage`` into ``path``, atomically, mode 0600; UsageError (one line) when it cannot be."""
    _write(path, usage.to_json())


def _write(path: Path, text: str) -> None:
    try:
        if not path.parent.exists():
            path.parent.mkdir(mode=DIR_MODE, parents=True)
        atomic_write(path, text, mode=FILE_MODE)
    except OSError as err:
        raise UsageError(f"cannot write {path}: {err.strerror or err}") from None


def _dump(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"


def _document(text: str, schema: str) -> JsonObject:
    try:
        data = loads(text)
    except ValueError as err:
        raise ValueError(f"not JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("schema") != schema:
        raise ValueError(f"its schema is {str(data.get('schema'))[:40]!r}")
    return data


def _list(data: Mapping[str, Any], name: str) -> list[Any]:
    value = data.get(name)
    if not isinstance(value, list):
        raise ValueError(f"{name!r} is not a list")
    return value


def _record(item: Any) -> KeyRecord:
    if not isinstance(item, dict):
        raise ValueError("a key that is not an object")
    digest = item.get("sha256")
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise ValueError(f"key {str(item.get('name'))[:64]!r} has no SHA-256 of 64 hex digits")
    revoked = item.get("revoked")
    return KeyRecord(
        _name(item.get("name")),
        digest,
        _time(item.get("created"), "created"),
        None if revoked is None else _time(revoked, "revoked"),
    )


def _one_active_each(keyfile: KeyFile) -> None:
    counted = Counter(key.name for key in keyfile.keys if key.active)  # not quadratic
    twice = sorted(name for name, count in counted.items() if count > 1)
    if twice:
        raise ValueError(f"two active keys named {twice[0]}")
    # one key under two names: revoking one would leave it working under the other
    owners: dict[str, str] = {}
    for key in keyfile.keys:
        if key.active and owners.setdefault(key.sha256, key.name) != key.name:
            raise ValueError(f"keys {owners[key.sha256]} and {key.name} have the same SHA-256")


def _name(value: Any) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError(f"{str(value)[:64]!r} is not a key name")
    return value


def _time(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} is not a time in seconds")
    return float(value)


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} is not a count")
    return value


def _usage(counts: Any) -> KeyUsage:
    if not isinstance(counts, dict):
        raise ValueError("a key's counts are not an object")
    return KeyUsage(*(_count(counts.get(name, 0), name) for name in _COUNTS))
