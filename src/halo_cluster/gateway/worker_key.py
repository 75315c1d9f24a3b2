"""The key the gateway shows the engines behind it (the *worker key*): made once per cluster,
kept 0600 in the cluster's state directory. Every replica of a deployment requires it (it
is the engines' own API key), the key gate puts it on each request it lets through, and
clients never see it: what they hold are the gateway's keys (``gateway.keys``). With it, an
engine bound to its node's network address answers nobody who went around the gateway."""

from __future__ import annotations

import secrets
from pathlib import Path

from halo_cluster.atomic import atomic_write
from halo_cluster.bounded.infile import read_text
from halo_cluster.config import Config
from halo_cluster.errors import StateError
from halo_cluster.runner.quote import WORKER_KEY_ENV  # where it travels: never argv

__all__ = ["WORKER_KEY_ENV", "worker_key", "worker_key_path"]


def worker_key_path(config: Config) -> Path:
    return config.path.parent / ".halo" / f"{config.name}.worker.key"


def worker_key(config: Config) -> str:
    """The cluster's worker key, made on first use."""
    path = worker_key_path(config)
    if path.exists():
        key = read_text(path, 4096, "the gateway's worker key", StateError).strip()
        if len(key) >= 32 and key.isprintable() and " " not in key:
            return key
        raise StateError(f"{path}: not a worker key halo wrote: remove it and run again")
    key = "halo-worker-" + secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write(path, key + "\n", prefix=".worker.", mode=0o600)
    return key
