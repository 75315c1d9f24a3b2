"""The gateway's scripts on the head (pure: text for ``bash -s``, values quoted): the router
and the key gate started detached (``engines.scripts``: a log and a pid file each, in
halo's state directory there), halo's files for the gate written 0600 beside them, and the
router's worker list read and set through its own HTTP API on the head's loopback, by the
head's Python (standard library only)."""

from __future__ import annotations

import json
import secrets
import shlex

from halo_cluster.engines.scripts import STATE_DIR
from halo_cluster.runner.quote import exports, private_dir

ROUTER, GATE = "router", "gateway"  # the processes' names beside the cluster's


def process_name(cluster: str, role: str) -> str:
    """The name under which ``engines.scripts`` keeps the process's log and pid file."""
    return f"{cluster}.{role}"


def state_dir_script() -> str:
    """Print halo's state directory on the head, expanded there (made 0700 when missing)."""
    return f"set -e\n{private_dir(STATE_DIR)}printf %s {STATE_DIR}\n"


def file_path(state_dir: str, cluster: str, what: str) -> str:
    """A gateway file in the head's state directory (``keys``, ``usage``, ``models``)."""
    return f"{state_dir}/gateway-{cluster}.{what}.json"


def write_files_script(files: dict[str, str]) -> str:
    """Write each path with its text, 0600, atomically (a temporary file renamed over it):
    the gate reads them whenever they change."""
    lines = ["set -e\numask 077\n"]
    for path, text in files.items():
        end = f"HALO_FILE_{secrets.token_hex(8)}"  # a heredoc's end the text cannot hold
        word, temporary = shlex.quote(path), shlex.quote(path + ".tmp")
        lines.append(f"cat > {temporary} <<'{end}'\n{text}\n{end}\nmv -f {temporary} {word}\n")
    return "".join(lines)


def read_file_script(path: str) -> str:
    return f"cat {shlex.quote(path)} 2>/dev/null\nexit 0\n"


# Reads HALO_ROUTER (the router's base URL) and HALO_WORKERS (JSON: null to only read, else
# the list of {"url", "model_id"} the router should hold); prints the router's list as JSON.
_WORKERS_PY = r"""
import json, os, sys, urllib.parse, urllib.request
base = os.environ["HALO_ROUTER"]
want = json.loads(os.environ["HALO_WORKERS"])
def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as answer:
        return json.loads(answer.read(1 << 20) or b"null")
try:
    have = call("GET", "/workers").get("workers") or []
    if want is not None:
        wanted = {(w["url"], w["model_id"]) for w in want}
        for w in have:
            if (w.get("url"), w.get("model_id")) not in wanted:
                call("DELETE", "/workers/" + urllib.parse.quote(w["url"], safe=""))
        held = {(w.get("url"), w.get("model_id")) for w in have}
        for url, model in sorted(wanted - held):
            call("POST", "/workers", {"url": url, "model_id": model})
        have = call("GET", "/workers").get("workers") or []
except Exception as err:
    print("the router at %s: %s" % (base, err), file=sys.stderr)
    sys.exit(3)
print(json.dumps([{"url": w.get("url"), "model_id": w.get("model_id"),
                   "healthy": bool(w.get("is_healthy"))} for w in have]))
"""


def workers_script(python: str, router_port: int, want: list[dict[str, str]] | None) -> str:
    """Set the router's workers to ``want`` (None: leave them), then print its list."""
    env = {
        "HALO_ROUTER": f"http://127.0.0.1:{int(router_port)}",
        "HALO_WORKERS": json.dumps(want),
    }
    end = f"HALO_PY_{secrets.token_hex(8)}"
    return f"{exports(env)}{shlex.quote(python)} - <<'{end}'\n{_WORKERS_PY}\n{end}\n"
