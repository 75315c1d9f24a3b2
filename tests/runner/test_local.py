"""LocalRunner: streamed output lines (progress of long remote work), timeouts, Ctrl-C, a
program that cannot start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from halo_cluster.runner.local import LocalRunner
from halo_cluster.runner.result import NOT_FOUND, TIMED_OUT


def test_lines_arrive_while_the_process_runs() -> None:
    seen: list[tuple[str, float]] = []
    start = time.monotonic()
    script = "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.3)\n"
    result = LocalRunner().run(
        [sys.executable, "-c", script],
        timeout=20,
        on_line=lambda line: seen.append((line, time.monotonic() - start)),
    )
    assert result.ok and result.stdout == "0\n1\n2\n"
    assert [line for line, _t in seen] == ["0", "1", "2"]
    assert seen[0][1] < seen[-1][1] - 0.4  # the first line came before the process ended


def test_streamed_stdin_stderr_timeout_and_missing_program() -> None:
    echo = LocalRunner().run(
        ["bash", "-c", "cat; echo oops >&2; exit 3"], stdin="hello\n", on_line=lambda _l: None
    )
    assert (echo.returncode, echo.stdout, echo.stderr) == (3, "hello\n", "oops\n")
    slow = LocalRunner().run(["sleep", "30"], timeout=0.5, on_line=lambda _l: None)
    assert slow.returncode == TIMED_OUT and "timed out" in slow.stderr
    missing = LocalRunner().run(["no-such-program-here"], on_line=lambda _l: None)
    assert missing.returncode == NOT_FOUND


def test_ctrl_c_kills_the_child() -> None:
    code = textwrap.dedent(
        """
        import sys
        from halo_cluster.runner.local import LocalRunner
        try:
            LocalRunner().run(["sleep", "60"], timeout=120, on_line=print)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    time.sleep(1.0)
    children = subprocess.run(
        ["pgrep", "-P", str(parent.pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    assert children
    os.kill(parent.pid, signal.SIGINT)
    out, _err = parent.communicate(timeout=20)
    assert out.strip() == "interrupted"
    for child in children:
        stat = Path(f"/proc/{child}/stat")
        assert not stat.exists() or stat.read_text().split()[2] == "Z"  # gone (or unreaped)


def test_a_program_that_cannot_start(tmp_path: Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\necho hi\n")
    for on_line in (None, lambda _l: None):
        result = LocalRunner().run([str(script)], on_line=on_line)
        assert (result.returncode, result.stderr) == (126, f"{script}: Permission denied")
