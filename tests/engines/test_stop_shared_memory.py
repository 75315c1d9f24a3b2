"""What the serve's stop script removes from /dev/shm, run for real in a private mount
namespace with its own /dev/shm: the segments the run made that nobody holds, over a
restart too; never an older one, never a held one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from halo_cluster.engines.scripts import background_script, stop_script
from tests.needs import require

SERVER = ["bash", "-c", "exec 3>/dev/shm/psm_server; sleep 300"]


def _steps(tmp: Path) -> str:
    """Two runs of a server with a restart between them. Ranks outside its process group
    (as Ray's are) hold segments too: one ends half a second after the server, one outlives
    the first stop and ends before the second."""
    wait_for = "for i in $(seq 100); do [ -e {0} ] && break; sleep 0.1; done\n"
    server_pid = f"$(cat {tmp}/home/.local/state/halo/serve-lab.pid)"
    return (
        "set -e\nmount -t tmpfs tmpfs /dev/shm\n"
        "touch -d '1 hour ago' /dev/shm/psm_before\n"
        + background_script({}, SERVER, "lab")
        + wait_for.format("/dev/shm/psm_server")
        + f"s={server_pid}\n"
        'setsid bash -c \'exec 3>/dev/shm/psm_rank1; while kill -0 "$1" 2>/dev/null; do '
        'sleep 0.1; done; sleep 0.5\' _ "$s" >/dev/null 2>&1 < /dev/null &\n'
        "setsid bash -c 'exec 3>/dev/shm/psm_rank2; exec sleep 300' >/dev/null 2>&1 "
        "< /dev/null &\nlate=$!\n"
        + wait_for.format("/dev/shm/psm_rank2")
        + "set +e\n(\n"
        + stop_script("lab")
        + ')\necho "first stop: $?"\n'
        "echo \"after the first stop: $(ls /dev/shm | tr '\\n' ' ')\"\n"
        'echo "marks: $(ls ~/.local/state/halo | grep -c since)"\nset -e\n'
        + background_script({}, SERVER, "lab")
        + "sleep 0.1\n"  # a pid file newer than the held segment, as a restart's is
        + wait_for.format("/dev/shm/psm_server")
        + 'kill "$late"; while kill -0 "$late" 2>/dev/null; do sleep 0.1; done\n'
        + "set +e\n(\n"
        + stop_script("lab")
        + ')\necho "second stop: $?"\n'
        "echo \"after the second stop: $(ls /dev/shm | tr '\\n' ' ')\"\n"
        'echo "marks: $(ls ~/.local/state/halo | grep -c since)"\n'
    )


def test_a_segment_held_past_a_stop_is_removed_by_the_next_one(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "a private /dev/shm needs root")
    (tmp_path / "home").mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home")}
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-s"],
        input=_steps(tmp_path), capture_output=True, text=True, env=env, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.stdout.splitlines() == [
        "first stop: 0",
        # the server's and the rank's that ended after it are gone; the older one stays,
        # and so does the one still held, with the mark of when the run began
        "after the first stop: psm_before psm_rank2 ",
        "marks: 1",
        "second stop: 0",
        # the restart's stop removes what the first run left once nobody holds it
        "after the second stop: psm_before ",
        "marks: 0",
    ], done.stdout + done.stderr
