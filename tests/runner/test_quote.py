"""runner.quote: what a script exports and runs reaches the program exactly as given, through a
real ``bash -s``, whatever the values hold (quotes, newlines, ``$``, unicode); a Ray token
becomes a 0600 file and never an exported value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from halo_cluster.runner.quote import RAY_TOKEN_ENV, SCRIPT_ARGV, exports, node_script

# what a value may hold: anything but NUL (which no environment or argv can carry)
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
NAMES = st.from_regex(r"HALO_Q_[A-Z0-9_]{0,10}", fullmatch=True)
SHOW = (
    "import json, os, sys\n"
    "env = {k: v for k, v in os.environ.items() if k.startswith(('HALO_', 'RAY_AUTH'))}\n"
    "print(json.dumps({'argv': sys.argv[1:], 'env': env}))\n"
)
NASTY = {
    "HALO_Q_QUOTES": 'it\'s "quoted" `and` \\back',
    "HALO_Q_LINES": "one\ntwo\r\n\nthree",
    "HALO_Q_DOLLAR": "$HOME ${PATH} $(rm -rf /) $((1+1)) !!",
    "HALO_Q_UNICODE": "Grüße — 漢字 🚀 \u200b",
    "HALO_Q_EMPTY": "",
}


def run_script(script: str, state: str) -> dict[str, Any]:
    """``script`` through a real ``bash -s``; what the program it execs saw."""
    env = {"PATH": os.environ["PATH"], "HOME": state, "XDG_STATE_HOME": state, "LC_ALL": "C.UTF-8"}
    done = subprocess.run(
        list(SCRIPT_ARGV), input=script.encode(), env=env, capture_output=True, timeout=20
    )
    assert done.returncode == 0, done.stderr
    seen: dict[str, Any] = json.loads(done.stdout)
    return seen


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(NAMES, TEXT, max_size=4), st.lists(TEXT, max_size=4))
@example(NASTY, list(NASTY.values()))
def test_values_and_arguments_arrive_exactly(env: dict[str, str], argv: list[str]) -> None:
    with tempfile.TemporaryDirectory() as state:
        seen = run_script(node_script(env, [sys.executable, "-c", SHOW, *argv]), state)
    assert seen == {"argv": argv, "env": env}


@settings(max_examples=20, deadline=None)
@given(TEXT.filter(bool), TEXT)
@example("tok'en\n$(touch /tmp/halo-pwned)", "x")
def test_a_ray_token_becomes_a_private_file(token: str, other: str) -> None:
    with tempfile.TemporaryDirectory() as state:
        env = {RAY_TOKEN_ENV: token, "HALO_Q_OTHER": other}
        seen = run_script(node_script(env, [sys.executable, "-c", SHOW]), state)
        path = Path(seen["env"]["RAY_AUTH_TOKEN_PATH"])
        assert path.parent == Path(state) / "halo"
        assert path.read_bytes() == token.encode()
        assert path.stat().st_mode & 0o777 == 0o600
    assert seen["env"] == {
        "HALO_Q_OTHER": other,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(path),
    }  # the token itself is no exported value


def test_the_script_shape() -> None:
    assert exports({"A": "x y"}) == "export A='x y'\n"
    assert node_script({}, ["ray", "start", "--x=a b"]) == "set -e\nexec ray start '--x=a b'\n"
    assert exports({RAY_TOKEN_ENV: ""}) == ""  # no token: no file, no auth mode
