from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from halo_cluster.cluster.gather import ETHTOOL_MARK, NAMES_MARK
from halo_cluster.runner.result import Result

FIXTURES = Path(__file__).parent / "fixtures"
ROOTS = FIXTURES / "roots"
EXPECTED = FIXTURES / "expected"
OUTPUTS = FIXTURES / "outputs"
SCENARIOS = sorted(p.name for p in ROOTS.iterdir())
IN_CI = os.environ.get("CI") == "true"
# the tiers (markers and their check) and the fixtures that give the lab and engine tiers
# their prerequisites, and the record of where the minutes go (--suite-timing)
pytest_plugins = [
    "tests.parallel",
    "tests.tiers",
    "tests.needs",
    "tests.models_once",
    "tests.suite_timing",
]


def pytest_configure(config: pytest.Config) -> None:
    hear_ctrl_c()
    if not hasattr(config, "workerinput"):  # once per run: not again in each parallel worker
        sweep_stale_labs()


def sweep_stale_labs() -> None:
    """Remove the labs an earlier test run left whose directory pytest has since deleted
    (a run killed mid-test never took its lab down): their fixed names ('eng', 'mon', …)
    would otherwise be taken, and the tests that use them fail at 'halo lab up'."""
    if os.geteuid() != 0:
        return
    from halo_cluster.lab.registry import sweep
    from halo_cluster.lab.state import registered, registered_names

    for name in registered_names():
        lab = registered(name)
        if lab is not None and "/pytest-of-" in lab.dir and not Path(lab.dir).is_dir():
            sweep(name)


def hear_ctrl_c() -> None:
    """Make the programs the tests start hear Ctrl-C, however the suite itself was started.

    A shell without job control starts a job sent to the background (``cmd &``, ``nohup
    cmd &``, a CI step's background script) with SIGINT ignored, and an ignored signal stays
    ignored across fork and exec: pytest, and every halo a test starts, would inherit it.
    Python then installs no KeyboardInterrupt handler, so a test's Ctrl-C reached halo as
    nothing while its ssh children (whose multiplexing client sets its own handler) died of
    it: the Ctrl-C lab tests failed as if halo ignored Ctrl-C (exit 1 on a killed remote
    tool, a serve that kept waiting for /health). Python's own handler here instead of the
    ignore: a handled signal is reset to its default in an exec'd child, so each child
    starts as it would from a terminal."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def require(condition: bool, reason: str) -> None:
    """Skip outside CI when a prerequisite is missing; under CI=true it is a failure."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"prerequisite missing under CI=true: {reason}")
    pytest.skip(reason)


@pytest.fixture
def root_copy(tmp_path: Path):
    """A writable copy of a fixture root (symlinks kept)."""

    def copy(scenario: str) -> Path:
        target = tmp_path / scenario
        shutil.copytree(ROOTS / scenario, target, symlinks=True)
        return target

    return copy


def python39() -> str:
    """The real CPython 3.9 that `make python39` unpacks (the node side's oldest Python)."""
    import glob

    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    found = sorted(glob.glob(os.path.join(base, "halo", "python-3.9.*", "bin", "python3.9")))
    require(bool(found), "no Python 3.9: run 'make python39'")
    return found[-1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def strix_peer(inv):  # type: ignore[no-untyped-def]
    """The healthy Strix node as its peer would look: fabric address .2 and its RoCE v2 GID."""
    from dataclasses import replace

    port = inv.rdma[0].ports[0]
    gid = replace(port.gids[1], gid=port.gids[1].gid[:-4] + "6402", ipv4="192.168.100.2")
    net = tuple(
        replace(i, ipv4=("192.168.100.2/30",)) if i.name == "enp194s0np0" else i for i in inv.net
    )
    rdma = (replace(inv.rdma[0], ports=(replace(port, gids=(port.gids[0], gid)),)),)
    return replace(inv, hostname="strix2", net=net, rdma=rdma)


HALO = str(Path(sys.executable).parent / "halo")


def halo(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``halo`` as a user would (extra environment on top of ours)."""
    return subprocess.run(
        [HALO, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def halo_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``halo ARGS`` in this process (exit code, stdout, stderr): the CLI's own behaviour,
    without starting a Python (``halo`` above runs the installed one)."""
    from halo_cluster.cli import main

    code = 0
    try:
        main(list(args))
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def ping_answer(
    reached: bool | Callable[[str], bool] = True,
    ethtool: tuple[str, str] | None = None,
    names: Mapping[str, str] | None = None,
) -> Callable[..., Result]:
    """A fake host's answer to the gather's host script (cluster/gather.host_view): each
    address answers its ping when ``reached`` says so (for every address when it is a
    bool); ``ethtool``: (interface, ``ethtool -i`` output) of the fabric interface;
    ``names``: what each peer's name resolves to (a name not in it resolves to nothing)."""

    def answer(argv: tuple[str, ...], stdin: str) -> Result:
        lines = [line for line in stdin.splitlines() if line.startswith("(ping ")]
        out = []
        for index, line in enumerate(lines):
            address = shlex.split(line[1 : line.index(" >")])[-1]
            good = reached if isinstance(reached, bool) else reached(address)
            out.append(f"{index} {0 if good else 1}")
        asked = [line for line in stdin.splitlines() if line.startswith("for n in ")]
        if asked:
            out.append(NAMES_MARK.strip())
            for name in shlex.split(asked[0][len("for n in ") : -len("; do")]):
                out.append(f"{name}={(names or {}).get(name, '')}")
        if ethtool is not None and "ethtool -i" in stdin:
            out += [f"{ETHTOOL_MARK}{ethtool[0]}", ethtool[1].rstrip("\n")]
        return Result(argv, 0, "".join(f"{line}\n" for line in out), "")

    return answer
