"""How the supervisor runs on the head (pure: the scripts that start and stop it there).

Where the head runs systemd, the supervisor is a unit, ``halo-supervise-CLUSTER.service``,
installed as every halo daemon is (``runner.daemon``): in the system manager when halo
reaches the head as root, in the user's manager when that user has lingering on. systemd
then restarts a supervisor that died (``Restart=on-failure``, at most
5 times in 5 minutes) and starts it at boot, after which it finds the server gone and brings
the group back. Elsewhere (no systemd, a container, a user without lingering) it is a detached
process of its own group, as before. Either way it runs one wrapper script, 0700 in the head's
state directory, that writes its pid file, appends to its log and execs the node command, so
``halo status``, ``halo logs --supervisor`` and ``halo stop`` find it the same way.
"""

from __future__ import annotations

import re
import secrets
import shlex

from halo_cluster.engines import scripts
from halo_cluster.runner.daemon import NONE, SYSTEM, USER, Daemon, install_script, remove_script

MODES = (SYSTEM, USER, "detached")
ROLE = "supervise"  # its log and pid file: scripts.log_paths(cluster, ROLE)


def unit_name(cluster: str) -> str:
    """The unit's name: the cluster's, with anything systemd would escape made a dash."""
    return f"halo-supervise-{re.sub(r'[^A-Za-z0-9_.-]', '-', cluster)}.service"


def wrapper_path(base: str) -> str:
    return f"{base}.sh"


def start_script(cluster: str, argv: list[str], base: str) -> str:
    """On the head: write the wrapper, then start it as a unit where systemd runs (prints
    ``mode=systemd`` or ``mode=systemd-user``), else detached (``mode=detached``). ``base``:
    the supervisor's files in the head's state directory, without their suffix (expanded)."""
    log, pid = scripts.log_paths(cluster, ROLE)
    end = f"HALO_WRAPPER_{secrets.token_hex(8)}"  # a heredoc's end that argv cannot hold
    wrapper = shlex.quote(wrapper_path(base))
    daemon = Daemon(
        unit_name(cluster),
        f"halo supervisor of cluster {_unit_word(cluster)}",
        ("/bin/bash", wrapper_path(base)),
        start_limit=(300, 5),
        service=("KillMode=mixed",),
        user_manager=True,
    )
    return (
        "set -e\numask 077\n"
        f"w={wrapper}\n"
        "{\n"
        "  echo '#!/bin/bash'\n"
        "  echo '# halo supervisor of cluster " + _unit_word(cluster) + "'\n"
        "  echo 'umask 077'\n"
        "  printf 'export HOME=%q\\n' \"$HOME\"\n"
        "  for v in XDG_STATE_HOME XDG_CACHE_HOME XDG_CONFIG_HOME; do\n"
        '    if [ -n "${!v:-}" ]; then printf \'export %s=%q\\n\' "$v" "${!v}"; fi\n'
        "  done\n"
        f"  cat <<'{end}'\n"
        "cd\n"
        f"echo $$ > {pid}\n"
        f"exec {shlex.join(argv)} >> {log} 2>&1 < /dev/null\n"
        f"{end}\n"
        '} > "$w"\n'
        'chmod 700 "$w"\n'
        f"{install_script(daemon)}"
        f'if [ "$mode" = {NONE} ]; then\n'
        '  mode=detached; cd; setsid bash "$w" > /dev/null 2>&1 < /dev/null &\n'
        "fi\n"
        'echo "mode=$mode"\n'
    )


def _unit_word(text: str) -> str:
    """Text safe inside a single-quoted shell word and a unit file's value."""
    return re.sub(r"[^A-Za-z0-9_.@-]", "-", text)


def stop_script(cluster: str) -> str:
    """On the head: the unit disabled and removed where there is one (so that no boot starts
    it again), then the supervisor's process group ended; exit 3 when nothing ran."""
    _log, pid = scripts.log_paths(cluster, ROLE)
    return (
        f"{remove_script(unit_name(cluster))}"
        f"{scripts.kill_group(pid, none='$svc')}"
        'rm -f "$pidfile"\n'
        '[ "$svc" = 0 ] && ran=0\n'
        "exit $ran\n"
    )
