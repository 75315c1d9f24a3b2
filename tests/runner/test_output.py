"""What the controller keeps of a command's output (issue 29: a node printing 300 MB made it
hold 904 MB): the first and last bytes of each stream up to a cap, the cut said in the text;
a streamed line over its cap reaches its reader once, cut. With real processes printing far
more than the caps, the memory the controller uses stays near the caps."""

from __future__ import annotations

import io
import sys
import tracemalloc

from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.runner.local import LocalRunner
from halo_cluster.runner.output import (
    LINE_CAP,
    STDERR_CAP,
    STDOUT_CAP,
    Kept,
    as_text,
    read_lines,
)

MB = 1 << 20
# the most the controller may hold while a command prints 300 MB: the kept bytes, their copy
# and their text, a few times the caps (before the cap it held all of it, several times)
LIMIT = 5 * STDOUT_CAP


def kept(cap: int, *chunks: bytes) -> str:
    out = Kept(cap)
    for chunk in chunks:
        out.add(chunk)
    return out.text()


def test_under_the_cap_everything_is_kept() -> None:
    assert kept(10, b"0123", b"", b"456789") == "0123456789"
    assert kept(10) == ""


def test_over_the_cap_the_head_and_the_tail_and_the_count_cut() -> None:
    assert kept(10, b"0123456789abcdef") == "01234\n[... 6 bytes cut ...]\nbcdef"
    assert kept(10, b"01", b"234", b"56", b"789a", b"bcdef") == (
        "01234\n[... 6 bytes cut ...]\nbcdef"
    )
    assert kept(3, b"abcdef") == "a\n[... 3 bytes cut ...]\nef"


def test_the_text_is_what_text_mode_read() -> None:
    assert kept(100, b"a\r\nb\rc\n\xff") == "a\nb\nc\n\ufffd"
    assert as_text(b"caf\xc3\xa9") == "café"


@given(st.integers(1, 64), st.lists(st.binary(max_size=40), max_size=12))
def test_kept_is_the_head_and_tail_of_the_whole(cap: int, chunks: list[bytes]) -> None:
    whole = b"".join(chunks)
    if len(whole) <= cap:
        expected = as_text(whole)
    else:
        head, tail = whole[: cap // 2], whole[len(whole) - (cap - cap // 2) :]
        expected = f"{as_text(head)}\n[... {len(whole) - cap} bytes cut ...]\n{as_text(tail)}"
    assert kept(cap, *chunks) == expected


class Chunks(io.RawIOBase):
    """A stream whose reads return the given chunks, one each."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = [c for c in chunks if c]

    def read1(self, _size: int = -1) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


def lines_of(*chunks: bytes) -> tuple[list[str], str]:
    seen: list[str] = []
    out = Kept(1 << 30)
    read_lines(Chunks(list(chunks)), out, seen.extend)  # type: ignore[arg-type]
    return seen, out.text()


def test_lines_as_text_mode_splits_them() -> None:
    expected = (["a", "b", "c", "d", "", "last"], "a\nb\nc\nd\n\nlast")
    assert lines_of(b"a\nb\r\nc\rd\n\nlast") == expected
    assert lines_of(b"a\nb\r", b"\nc\r", b"d\n", b"\nla", b"st") == expected
    assert lines_of(b"") == ([], "")
    assert lines_of(b"x\r") == (["x"], "x\n")


@given(st.lists(st.binary(max_size=30), max_size=10))
def test_lines_are_those_text_mode_reads_however_the_reads_fall(chunks: list[bytes]) -> None:
    whole = b"".join(chunks)
    text = io.TextIOWrapper(io.BytesIO(whole), encoding="utf-8", errors="replace").read()
    lines = text.split("\n")
    assert lines_of(*chunks) == (lines[:-1] if lines[-1] == "" else lines, text)


def test_a_line_over_its_cap_comes_once_with_the_count_cut() -> None:
    over = LINE_CAP + 12345
    data = b"x" * over + b"\nnext\n" + b"y" * (LINE_CAP * 2)  # the last one has no end
    seen, whole = lines_of(*(data[i : i + 50000] for i in range(0, len(data), 50000)))
    assert seen == [
        "x" * LINE_CAP + " [... 12345 bytes cut ...]",
        "next",
        "y" * LINE_CAP + f" [... {LINE_CAP} bytes cut ...]",
    ]
    assert len(whole) == len(data)  # what is kept is bounded by its own cap, not the line's


# -- real processes printing far more than the caps --------------------------------------------

PRINT = """\
import sys
out, err, line = (int(n) for n in sys.argv[1:])
if line:
    block = (b"x" * (line - 1) + b"\\n") * ((40 << 10) // line)
else:
    block = b"0123456789" * (4 << 10)
write = sys.stdout.buffer.write
write(b"FIRST\\n")
for _ in range(out // len(block)):
    write(block)
write(b"LAST\\n")
sys.stdout.flush()
sys.stderr.buffer.write(b"E" * err + b"\\nthe error\\n")
"""


def printing(out: int, err: int, line: int = 0) -> list[str]:
    return [sys.executable, "-c", PRINT, str(out), str(err), str(line)]


def peak_while(run) -> tuple[object, int]:  # type: ignore[no-untyped-def]
    tracemalloc.start()
    try:
        result = run()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_command_printing_300_mb_keeps_the_caps_only() -> None:
    result, peak = peak_while(lambda: LocalRunner().run(printing(300 * MB, 8 * MB), timeout=120))
    assert result.returncode == 0  # type: ignore[attr-defined]
    stdout, stderr = result.stdout, result.stderr  # type: ignore[attr-defined]
    assert stdout.startswith("FIRST\n0123456789") and stdout.endswith("0123456789LAST\n")
    assert " bytes cut ...]\n" in stdout
    assert len(stdout.encode()) < STDOUT_CAP + 100
    assert stderr.startswith("EEEE") and stderr.endswith("E\nthe error\n")
    assert f"\n[... {8 * MB + 11 - STDERR_CAP} bytes cut ...]\n" in stderr
    assert peak < LIMIT, peak


def test_streamed_lines_of_a_command_printing_300_mb_keep_the_caps_only() -> None:
    count = 0

    def each(_line: str) -> None:
        nonlocal count
        count += 1

    line = 4 << 10  # 4 KB lines, as a chatty node prints them
    result, peak = peak_while(
        lambda: LocalRunner().run(printing(300 * MB, 0, line), timeout=120, on_line=each)
    )
    assert result.returncode == 0  # type: ignore[attr-defined]
    stdout = result.stdout  # type: ignore[attr-defined]
    assert stdout.startswith("FIRST\n") and stdout.endswith("\nLAST\n")
    assert len(stdout.encode()) < STDOUT_CAP + 100
    assert count == 2 + (300 * MB) // (40 << 10) * 10
    assert peak < LIMIT, peak


def test_one_endless_line_reaches_on_line_once_cut() -> None:
    seen: list[str] = []
    result = LocalRunner().run(
        [sys.executable, "-c", "import sys; sys.stdout.write('z' * (64 << 20))"],
        timeout=120,
        on_line=seen.append,
    )
    assert result.ok
    assert seen == ["z" * LINE_CAP + f" [... {(64 << 20) - LINE_CAP} bytes cut ...]"]


def test_a_timed_out_command_keeps_what_it_printed() -> None:
    script = "import sys, time\nprint('so far', flush=True)\nprint('err', file=sys.stderr)\n"
    script += "time.sleep(60)\n"
    for on_line in (None, lambda _l: None):
        result = LocalRunner().run([sys.executable, "-c", script], timeout=2, on_line=on_line)
        assert (result.returncode, result.stdout, result.stderr) == (
            124,
            "so far\n",
            "timed out after 2 s",
        )


def test_a_child_holding_the_pipe_open_does_not_hold_the_controller() -> None:
    """A background child that keeps stdout open: the run ends at its timeout, as before."""
    result = LocalRunner().run(["bash", "-c", "echo started; sleep 8 & exit 0"], timeout=2)
    assert (result.returncode, result.stdout) == (124, "started\n")


def test_stdin_larger_than_a_pipe_while_the_command_prints() -> None:
    """Written in its own thread: a command that prints before it reads cannot deadlock."""
    data = "x" * (4 * MB)
    script = "import sys\nprint('y' * (1 << 20), flush=True)\nprint(len(sys.stdin.read()))\n"
    result = LocalRunner().run([sys.executable, "-c", script], stdin=data, timeout=60)
    assert (result.returncode, result.stdout) == (0, "y" * MB + f"\n{4 * MB}\n")
