"""Text from outside halo reaches a terminal through one helper (``printable``): on every
path (verify-log, env --explain, errors such as plan --gguf's, doctor, status) control
characters, escape sequences and bidi overrides are shown escaped and Rich markup is inert."""

from __future__ import annotations

import os
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.cli.cluster import _print_serve
from halo_cluster.cli.output import plain, safe
from halo_cluster.client.node import escaped, first_bytes
from halo_cluster.printable import printable, quoted
from tests.conftest import halo

HOSTILE = "[/x][bold red]\x1b[2J\x1b]0;title\x07\u202eevil\x00"
SHOWN = "[/x][bold red]\\x1b[2J\\x1b]0;title\\x07\\u202eevil\\x00"


def test_printable_escapes_what_a_terminal_would_act_on() -> None:
    assert printable(HOSTILE) == SHOWN
    assert printable("a\nb\tc\r") == "a\\nb\\tc\\r"
    assert printable("a\nb\tc\r", lines=True) == "a\nb\tc\\r"
    assert printable("fab\udcff0 é ✓") == "fab\\udcff0 é ✓"  # a byte that is not UTF-8
    assert printable("x" * 10, limit=4) == "xxxx…"
    assert quoted("\u200fname") == "'\\u200fname'"
    assert plain(HOSTILE + "\n") == SHOWN + "\n"
    assert safe("[/x]\x1b") == "\\[/x]\\x1b"
    # the node client's names for it are the same helper
    assert escaped("a\nb", 2) == "a\\n…" and first_bytes("\x1b[2J") == "'\\x1b[2J'"


@given(st.text(), st.booleans())
def test_nothing_unprintable_survives(text: str, lines: bool) -> None:
    shown = printable(text, lines=lines)
    kept = "\n\t" if lines else ""
    assert all(c.isprintable() or c in kept for c in shown)
    shown.encode("utf-8")  # no lone surrogate (it would raise): it always reaches a terminal


def test_verify_log_shows_markup_and_escapes_in_the_log(tmp_path: Path) -> None:
    """A version line with ``[/x]`` was a Rich MarkupError; escapes in evidence reached the
    terminal."""
    log = tmp_path / "rank0.log"
    log.write_text(
        "n1:1:1 [0] NCCL INFO NCCL version 2.21.5[/x]\x1b[2J+cuda12.4\n"
        "n1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [/y]\x1b]0;pwn\x07\n"
        "n1:1:1 [0] NCCL INFO Using network IB\n"
    )
    done = halo("verify-log", str(log))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "transport: roce",
        "NCCL/RCCL version: 2.21.5[/x]\\x1b[2J+cuda12.4; ranks seen: 1",
        "HCAs: mlx5_0:1; GPUDirect RDMA: unknown",
        "  n1:1: Using network IB",
        "evidence:",
        "  n1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [/y]\\x1b]0;pwn\\x07",
        "  n1:1:1 [0] NCCL INFO Using network IB",
    ]


def test_env_explain_comments_show_the_node_s_words_escaped(root_copy) -> None:  # type: ignore[no-untyped-def]
    root = root_copy("strix-e810")
    link = root / "sys/devices/pci0000:00/0000:00:02.1/0000:c2:00.0/ice.roce.0/driver"
    link.unlink()
    link.symlink_to("../../../../../bus/auxiliary/drivers/ir\x1b[2J\u202edma")
    done = halo("env", "--root", str(root), "--explain")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (
        "# transport: roce on rocep194s0/1 (100 Gb/s, ir\\x1b[2J\\u202edma)"
    )
    assert "\x1b" not in done.stdout + done.stderr


def test_an_error_line_shows_a_hostile_path_escaped(tmp_path: Path) -> None:
    """``plan --gguf`` (and every other command): the one error line is printed escaped."""
    gguf = tmp_path / "m\x1b[2J\u202e.gguf"
    gguf.write_bytes(b"NOPE" + bytes(60))
    done = halo("plan", "--gguf", os.fsdecode(gguf))
    assert done.returncode == 2
    assert done.stderr.startswith(f"halo: error: {tmp_path}/m\\x1b[2J\\u202e.gguf: ")
    assert done.stderr.count("\n") == 1 and "\x1b" not in done.stderr


def test_doctor_shows_a_hostile_interface_name_escaped(root_copy) -> None:  # type: ignore[no-untyped-def]
    from tests.test_interface_names import rename_interface

    root = root_copy("strix-e810")
    rename_interface(root, b"enp194s0np0", b"fab\x1b[2J")
    done = halo("doctor", "--root", str(root))
    assert "Traceback" not in done.stderr and "\x1b" not in done.stdout + done.stderr
    assert "interface 'fab\\x1b[2J' holds a control character" in done.stdout


def test_status_lines_show_the_server_s_words_escaped(capsys) -> None:  # type: ignore[no-untyped-def]
    _print_serve(
        {
            "healthy": False,
            "detail": "HTTP 500: \x1b[2Jgone\nnext",
            "model": "/m\u202e",
            "endpoint": "http://127.0.0.1:8000",
            "engine": "vllm",
            "executor": "mp",
            "ranks": [{"rank": 0, "node": "n1", "address": "10.0.0.1\x07"}],
            "proven": None,
            "supervisor": {
                "state": "failed",
                "restarts": 3,
                "cause": "crash loop: \x1b[31mrank 1\x07",
                "history": [{"at": 0, "state": "failed", "cause": "\x1b]0;t\x07"}],
            },
        }
    )
    at = time.strftime("%H:%M:%S", time.localtime(0))
    assert capsys.readouterr().out.splitlines() == [
        "serve /m\\u202e at http://127.0.0.1:8000 (vLLM, mp executor): "
        "UNHEALTHY (HTTP 500: \\x1b[2Jgone\\nnext)",
        "  ranks: rank 0 on n1 (10.0.0.1\\x07); transport proven: no",
        "  supervisor: failed, 3 restart(s)",
        "    cause: crash loop: \\x1b[31mrank 1\\x07",
        f"    {at} failed: \\x1b]0;t\\x07",
    ]
