"""Scripts for ``bash -s`` (pure): values quoted, so nothing in them is ever parsed as code.

A script travels on stdin, never in argv: what it exports (names, values, secrets such as
an API key or Ray's token) does not show in ``ps`` on either end.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Mapping, Sequence

SCRIPT_ARGV = ("bash", "-s")  # a script on stdin
RAY_TOKEN_ENV = "HALO_RAY_TOKEN"  # a Ray auth token in a script's env (see ray/auth.py)
WORKER_KEY_ENV = "HALO_WORKER_KEY"  # the engines' key behind the gateway (gateway/worker_key.py)


def exports(env: Mapping[str, str]) -> str:
    """``export NAME=value`` lines for a script fed to ``bash -s``, every value quoted. A Ray
    token (``RAY_TOKEN_ENV``) becomes a 0600 token file in the node's state directory and
    ``RAY_AUTH_MODE=token`` + ``RAY_AUTH_TOKEN_PATH`` pointing at it."""
    lines = [f"export {k}={shlex.quote(v)}\n" for k, v in env.items() if k != RAY_TOKEN_ENV]
    token = env.get(RAY_TOKEN_ENV)
    if token:
        lines += _token_file(token)
    return "".join(lines)


def _token_file(token: str) -> list[str]:
    name = f"ray-{hashlib.sha256(token.encode()).hexdigest()[:12]}.token"
    state, path = '"$_halo_state"', f'"$_halo_state/{name}"'
    return [
        '_halo_state="${XDG_STATE_HOME:-$HOME/.local/state}/halo"\n',
        private_dir(state),
        private_files(path),
        f"printf %s {shlex.quote(token)} > {path}\n",
        f"export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={path}\n",
    ]


def private_dir(path: str) -> str:
    """Lines for a ``set -e`` script that make ``path`` (a shell word, expanded on the node)
    a directory of this user's, 0700 (made so when it is older), whatever the umask; one
    that is a link or another user's (anyone may make it first under /tmp) stops the script
    in one line."""
    return (
        f"(umask 077 && mkdir -p {path})\n"
        f"if [ -L {path} ] || [ ! -O {path} ]; then\n"
        f'  echo {path}": not a directory of this user\'s: refused" >&2; exit 1\nfi\n'
        f"chmod 700 {path}\n"
    )


def private_files(*paths: str) -> str:
    """Lines that make each of ``paths`` (shell words) a file only this user can read, 0600
    (an older one made so, its content kept), before the script writes it with ``>``."""
    words = " ".join(paths)
    return f'for _halo_f in {words}; do (umask 077 && : >> "$_halo_f"); done\nchmod 600 {words}\n'


def node_script(env: Mapping[str, str], argv: Sequence[str]) -> str:
    """The script a node runs: its environment exported, then the command (exec'd)."""
    return f"set -e\n{exports(env)}exec {shlex.join(argv)}\n"
