"""Ray's token authentication for the cluster halo starts: without it, anyone who reaches
the head's port can run code on every node.

The token is made on the first ``halo up`` and kept next to the cluster's state file,
mode 0600. It travels to the nodes only inside the scripts halo feeds to ``bash -s``
(``runner.quote.exports`` turns ``HALO_RAY_TOKEN`` into a 0600 token file on the node and
``RAY_AUTH_MODE=token`` + ``RAY_AUTH_TOKEN_PATH``): never argv, logs, JSON or the state.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile

from halo_cluster.config import Config
from halo_cluster.runner.quote import RAY_TOKEN_ENV

_warned: set[str] = set()


def token_path(config: Config) -> str:
    return str(config.path.parent / ".halo" / f"{config.name}.ray-token")


def ray_token(config: Config, create: bool = False) -> str | None:
    """The cluster's token (made when ``create`` and there is none); None when auth is off
    or no token was ever made."""
    if config.ray.auth == "none":
        if config.name not in _warned:
            _warned.add(config.name)
            print(
                f'halo: warning: [ray] auth = "none" in {config.path}: anyone who reaches '
                "the Ray head's port can run code on every node",
                file=sys.stderr,
            )
        return None
    path = token_path(config)
    try:
        with open(path, encoding="ascii") as handle:
            token = handle.read().strip()
        if token:
            return token
    except (OSError, UnicodeDecodeError):
        pass
    if not create:
        return None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    token = secrets.token_hex(32)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".ray-token.")  # 0600
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(token + "\n")
    try:
        os.link(tmp, path)  # only the first of two racing commands makes the token
    except FileExistsError:
        return ray_token(config)
    finally:
        os.unlink(tmp)
    return token


def ray_env(config: Config, create: bool = False) -> dict[str, str]:
    """What a node script needs to reach the cluster's Ray ({} when auth is off)."""
    token = ray_token(config, create)
    return {RAY_TOKEN_ENV: token} if token else {}
