"""The scripts of an engine's processes on a node (pure: text for ``bash -s``, values quoted),
whatever the engine: started detached with a log and a pid file in halo's state directory
there (``halo logs``, ``status`` and ``stop`` find them), asked whether they still run, read,
and stopped. ``engines.process`` runs them through a node's client."""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from halo_cluster.runner.quote import exports, private_dir, private_files

STATE_DIR = '"${XDG_STATE_HOME:-$HOME/.local/state}/halo"'


def local_host(host: str) -> str:
    """Where a server bound to ``host`` is reached from its own node."""
    return "127.0.0.1" if host == "0.0.0.0" else host


def log_paths(cluster: str, role: str = "serve") -> tuple[str, str]:
    """(log, pid file) on a node, as shell words (the state dir expands there): the
    engine's (``serve``) or the supervisor's (``supervise``)."""
    name = shlex.quote(cluster)  # validated, but quoted all the same
    return f"{STATE_DIR}/{role}-{name}.log", f"{STATE_DIR}/{role}-{name}.pid"


def since_path(cluster: str) -> str:
    """The marker (a shell word) whose age is when the engine's run on a node began: made by
    the first start, kept over restarts until a stop leaves no shared-memory segment newer
    than it, so a segment a restart could not remove (still held then) is removed later."""
    return f"{STATE_DIR}/serve-{shlex.quote(cluster)}.since"


# Sets $alive to 1 when the process in $p runs: a zombie (killed, its parent gone and not
# yet reaped by an init that waits) is dead, however kill -0 answers. The state is the
# field after the command's name in /proc/PID/stat (the name may hold spaces and ')').
_ALIVE = (
    'alive=0; if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then\n'
    '  s="$(cat "/proc/$p/stat" 2>/dev/null)"; s="${s##*) }"\n'
    '  case "${s%% *}" in Z|X) ;; *) alive=1 ;; esac\n'
    "fi\n"
)


def alive_script(cluster: str) -> str:
    """Exit 0 when the program 'halo serve' started on a node (its pid file) still runs."""
    _log, pid = log_paths(cluster)
    return f'p="$(cat {pid} 2>/dev/null)"\n{_ALIVE}[ "$alive" = 1 ]\n'


def background_script(env: Mapping[str, str], argv: list[str], cluster: str) -> str:
    """Start ``argv`` detached in its own process group, its output in the log, its pid
    in the pid file (both 0600, in the 0700 state directory, whatever the engine or the
    auth); the working directory is HOME (a node's caches and state live there)."""
    log, pid = log_paths(cluster)
    since = since_path(cluster)
    return (
        f"set -e\n{exports(env)}{private_dir(STATE_DIR)}{private_files(log, pid)}cd\n"
        # a mark from before the last boot marks no run of this boot
        f'if [ -e {since} ] && [ "$(stat -c %Y {since})" -lt '
        "\"$(awk '/^btime/ {print $2}' /proc/stat)\" ]; then "
        f"rm -f {since}; fi\n"
        f"[ -e {since} ] || (umask 077 && : > {since})\n"
        f"setsid {shlex.join(argv)} > {log} 2>&1 < /dev/null &\n"
        f"echo $! > {pid}\n"
    )


def tcp_probe(host: str, port: int) -> str:
    """A shell condition, true when ``host:port`` accepts a TCP connection within 2 s. The
    host and port reach the inner bash as arguments, never as code."""
    return (
        f"timeout 2 bash -c 'exec 3<>\"/dev/tcp/$1/$2\"' _ {shlex.quote(host)} "
        f"{shlex.quote(str(port))} 2>/dev/null"
    )


def reach_script(address: str, port: int, seconds: int) -> str:
    """Exit 0 once ``address:port`` accepts a TCP connection (within ``seconds``), else 1."""
    return (
        f"for i in $(seq {int(seconds) * 5}); do\n"
        f"  if {tcp_probe(address, port)}; then exit 0; fi\n"
        "  sleep 0.2\ndone\nexit 1\n"
    )


MEMINFO = (
    'while read -r k v _; do case "$k" in\n'
    '  MemTotal:) echo "mem_total_kib=$v" ;;\n'
    '  MemAvailable:) echo "mem_available_kib=$v" ;;\n'
    "esac; done < /proc/meminfo 2>/dev/null\n"
)


# The processes that hold the most of a node's memory (``checks.memory_owners``), one
# ``owner=PID PGID RSS_KIB GTT_KIB halo|other COMMAND`` line each: the 8 largest by resident
# memory, and every one holding GPU memory in GTT (amdgpu's drm-memory-gtt in
# /proc/PID/fdinfo, counted once per DRM client: on unified memory an engine's weights live
# there, not in its RSS); "halo" when its process group is one whose pid halo keeps in its
# state directory (a served engine, a supervisor).
OWNERS = (
    f'halo=" $(cat {STATE_DIR}/serve-*.pid {STATE_DIR}/supervise-*.pid 2>/dev/null '
    "| tr '\\n' ' ') \"\n"
    "gtt=\"$(grep -s -H -E '^(drm-client-id|drm-memory-gtt):' /proc/[0-9]*/fdinfo/* "
    '2>/dev/null | awk -F: \'{split($1, p, "/"); if ($2 == "drm-client-id") c[$1] = $3;'
    " else if (!((p[3], c[$1]) in seen)) { seen[p[3], c[$1]] = 1; g[p[3]] += $3 } }"
    ' END { for (q in g) printf "%s:%d ", q, g[q] }\')"\n'
    'ps -e -o pid=,pgid=,rss=,comm= --sort=-rss 2>/dev/null | awk -v halo="$halo" '
    '-v gtt="$gtt" \'BEGIN { n = split(gtt, l, " "); for (i = 1; i <= n; i++) '
    '{ split(l[i], f, ":"); G[f[1]] = f[2] } }'
    ' { w = index(halo, " " $2 " ") ? "halo" : "other"; g = ($1 in G) ? G[$1] : 0;'
    ' c = $4; for (i = 5; i <= NF; i++) c = c " " $i;'
    ' if (NR <= 8 || g > 0) print "owner=" $1 " " $2 " " $3 " " g " " w " " c }\''
    " | head -n 64\n"
)


def memory_script(size_path: str | None = None, drop_path: str | None = None) -> str:
    """MemTotal/MemAvailable (KiB) as ``key=value`` lines, the processes that hold the most
    of it (``OWNERS``) and, given ``size_path``, the bytes of that file or directory (links
    followed: a Hugging Face cache links its blobs). Given ``drop_path`` (a unified-memory
    node that opens the weights there), that path's pages are dropped from the page cache
    first (``dd iflag=nocache``: the kernel's DONTNEED advice, file by file, links followed;
    dirty pages stay), and where util-linux's ``fincore`` is there, the bytes cached before
    and after are said (``cached_before=``, ``cached_bytes=``)."""
    size = drop = ""
    if size_path is not None:
        quoted = shlex.quote(size_path)
        size = f'b="$(du -sbL -- {quoted} 2>/dev/null | cut -f1)"; echo "model_bytes=$b"\n'
    if drop_path is not None:
        files = f"find -L {shlex.quote(drop_path)} -type f -print0 2>/dev/null | xargs -0 -r"
        # printf %.0f: mawk (Debian's awk) prints a sum over 2^31 as 2.14748e+09 otherwise
        total = "awk '{s += $1} END {printf \"%.0f\\n\", s}'"
        cached = f"{files} fincore -b -n -o RES 2>/dev/null | {total}"
        drop = (
            "fin=0; command -v fincore >/dev/null 2>&1 && fin=1\n"
            f'[ "$fin" = 1 ] && echo "cached_before=$({cached})"\n'
            f"{files} -I{{}} dd if={{}} iflag=nocache count=0 status=none 2>/dev/null\n"
            f'if [ -e {shlex.quote(drop_path)} ]; then echo "dropped=1"; fi\n'
            f'[ "$fin" = 1 ] && echo "cached_bytes=$({cached})"\n'
        )
    return f"{drop}{MEMINFO}{OWNERS}{size}exit 0\n"


def progress_script(cluster: str) -> str:
    """A starting engine's signs of progress on a node, as ``key=value`` lines: whether it
    runs, the bytes of its log, and the bytes its process group moved to and from storage
    (``read_bytes`` + ``write_bytes`` of /proc/PID/io: files read, mapped weights paged in, a
    download or a compile cache written; not sockets, which a waiting engine polls all the
    time)."""
    log, pid = log_paths(cluster)
    return (
        f'p="$(cat {pid} 2>/dev/null)"\n{_ALIVE}echo "alive=$alive"\n'
        f'echo "log_bytes=$(stat -c %s {log} 2>/dev/null || echo 0)"\n'
        '[ "$alive" = 1 ] || exit 0\nb=0\n'
        "for q in $(ps -e -o pid=,pgid= | awk -v g=\"$p\" '$2 == g {print $1}'); do\n"
        '  while read -r k v; do case "$k" in read_bytes:|write_bytes:) b=$((b + v)) ;; esac\n'
        '  done 2>/dev/null < "/proc/$q/io"\ndone\necho "io_bytes=$b"\n'
    )


def limits_script(cluster: str, ray: bool = False) -> str:
    """The limits of the process 'halo serve' started on a node, as the kernel holds them
    (``checks.engine_limits.parse_limits_answer``): ``alive=``, ``pid=`` and ``cap_eff=`` (its
    effective capabilities, hex) lines, then its /proc/PID/limits, its /proc/PID/cgroup and
    its cgroup's memory.max (cgroup v1's memory.limit_in_bytes where there is no v2 one),
    each under a ``== name`` line and read with a bound. ``ray``: the ranks are Ray's
    workers, not halo's process: the node's oldest rank worker is read (its limits are its
    raylet's, from 'halo up'), else its raylet."""
    _log, pid = log_paths(cluster)
    found = (
        "p=\"$(pgrep -o -f 'RayWorkerWrapper|RayWorkerProc' 2>/dev/null || "
        'pgrep -o -f raylet 2>/dev/null)"\n'
        if ray
        else f'p="$(cat {pid} 2>/dev/null)"\n'
    )
    return (
        f'{found}{_ALIVE}echo "alive=$alive"\n'
        '[ "$alive" = 1 ] || exit 0\necho "pid=$p"\n'
        'sed -n "s/^CapEff:[[:space:]]*/cap_eff=/p" "/proc/$p/status" 2>/dev/null\n'
        'echo "== limits"; head -c 8192 "/proc/$p/limits" 2>/dev/null\n'
        'echo "== cgroup"; head -c 4096 "/proc/$p/cgroup" 2>/dev/null\n'
        'g="$(sed -n \'s/^0:://p\' "/proc/$p/cgroup" 2>/dev/null | head -n 1)"\n'
        'm="$(sed -n \'s/^[0-9]*:memory://p\' "/proc/$p/cgroup" 2>/dev/null | head -n 1)"\n'
        'if [ -n "$g" ] && [ -r "/sys/fs/cgroup$g/memory.max" ]; then\n'
        '  echo "== memory.max"; head -c 64 "/sys/fs/cgroup$g/memory.max"\n'
        'elif [ -n "$m" ] && [ -r "/sys/fs/cgroup/memory$m/memory.limit_in_bytes" ]; then\n'
        '  echo "== memory.max"; head -c 64 "/sys/fs/cgroup/memory$m/memory.limit_in_bytes"\n'
        "fi\nexit 0\n"
    )


def probe_script(cluster: str) -> str:
    """The supervisor's question to a member, answered as ``key=value`` lines: whether the
    process 'halo serve' started there runs, MemTotal/MemAvailable (KiB) and the 'full'
    line of /proc/pressure/memory where the kernel has it (``supervision.parse_member_answer``)."""
    _log, pid = log_paths(cluster)
    return (
        f'p="$(cat {pid} 2>/dev/null)"\n{_ALIVE}echo "alive=$alive"\n{MEMINFO}'
        "if [ -r /proc/pressure/memory ]; then\n"
        '  while read -r k rest; do [ "$k" = full ] && echo "psi_full=$rest"; done '
        "< /proc/pressure/memory\n"
        "fi\nexit 0\n"
    )


def log_script(cluster: str) -> str:
    log, _pid = log_paths(cluster)
    return f"cat {log} 2>/dev/null\nexit 0\n"


def log_tail_script(cluster: str, lines: int = 5) -> str:
    log, _pid = log_paths(cluster)
    return f"tail -n {int(lines)} {log} 2>/dev/null\nexit 0\n"


def kill_group(pid: str, none: str = "3") -> str:
    """Shell lines: end the process group whose leader's pid is in ``pid`` (TERM, KILL after
    5 s); ``$ran`` is 0 when it ran, 3 when not; without a pid file the script ends there
    (``exit none``)."""
    return (
        f"pidfile={pid}\n"
        f'p="$(cat "$pidfile" 2>/dev/null)" || exit {none}\n'
        'ran=3; if kill -0 "$p" 2>/dev/null; then ran=0; fi\n'
        'kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true\n'
        'for i in $(seq 50); do kill -0 -- "-$p" 2>/dev/null || break; sleep 0.1; done\n'
        'kill -KILL -- "-$p" 2>/dev/null || true\n'
    )


def stop_script(cluster: str) -> str:
    """Stop the server's process group (TERM, then KILL after 5 s), then remove the
    shared-memory segments its run left: those made since the run began (``since_path``,
    over restarts) that no process still has open or mapped, waiting up to 3 s for the
    last holders to end. Exit 3 when nothing was running."""
    _log, pid = log_paths(cluster)
    since = since_path(cluster)
    return kill_group(pid) + (
        # Ray's worker processes that ran the ranks end with their driver: wait for them.
        # Ray also leaves an idle worker it started for the server's job: end those that
        # were started after the server (never older ones, which are not the server's).
        'for i in $(seq 50); do pgrep -f "RayWorkerProc|RayWorkerWrapper" >/dev/null || break; '
        "sleep 0.1; done\n"
        'since=$(( $(date +%s) - $(stat -c %Y "$pidfile") + 1 ))\n'
        "for q in $(pgrep -f '^ray::IDLE'); do\n"
        '  age=$(ps -o etimes= -p "$q" 2>/dev/null | tr -d " ")\n'
        '  if [ -n "$age" ] && [ "$age" -le "$since" ]; then kill -TERM "$q" 2>/dev/null; fi\n'
        "done\n"
        f"mark={since}\n"
        '[ -e "$mark" ] || mark="$pidfile"\n'
        "for i in $(seq 30); do\n"
        "  held=0\n"
        # every /dev/shm path a process maps or holds open, read once a pass
        '  open="$( { cat /proc/[0-9]*/maps; ls -l /proc/[0-9]*/fd; } 2>/dev/null | '
        "grep -o '/dev/shm/[^ ]*' | sort -u)\"\n"
        "  for f in /dev/shm/*; do\n"
        '    [ -f "$f" ] && [ "$f" -nt "$mark" ] || continue\n'
        '    case "$f" in *[[:space:]]*) continue ;; esac\n'  # not told apart above: kept
        '    if printf \'%s\\n\' "$open" | grep -qxF -- "$f"; then held=1; else rm -f "$f"; fi\n'
        "  done\n"
        '  [ "$held" = 0 ] && break\n'
        "  sleep 0.1\n"
        "done\n"
        f'if [ "$held" = 0 ]; then rm -f {since}; fi\n'
        'rm -f "$pidfile"\n'
        "exit $ran\n"
    )
