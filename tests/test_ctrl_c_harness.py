"""The suite's own promise to its Ctrl-C tests: a program a test starts hears SIGINT, also
when the suite was started with SIGINT ignored (a background job of a shell without job
control). See ``conftest.hear_ctrl_c``."""

from __future__ import annotations

import signal
import subprocess
import sys

from tests.conftest import hear_ctrl_c


def test_a_program_the_tests_start_hears_ctrl_c() -> None:
    code = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "True", done.stderr


def test_an_inherited_ignore_is_undone() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        hear_ctrl_c()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
