"""Text that comes from a node is shown as text: Rich markup in it neither crashes nor
styles the output, control characters and ANSI escapes are shown escaped, and nothing
from a node can end a comment in a suggested fix."""

from __future__ import annotations

from halo_cluster.checks.fixes import set_mtu
from halo_cluster.cli.output import plain, safe
from tests.conftest import halo

HOSTILE = "[/x][link=file:///etc/shadow]evil[bold red]\x1b[31mred\x07"


def test_markup_and_escapes_in_a_hostname(root_copy) -> None:  # type: ignore[no-untyped-def]
    root = root_copy("no-rdma")
    (root / "proc/sys/kernel/hostname").write_text(HOSTILE + "\n")
    done = halo("inventory", "--root", str(root))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "\x1b" not in done.stdout
    assert "[/x][link=file:///etc/shadow]evil[bold red]\\x1b[31mred\\x07" in done.stdout


def test_plain_and_safe() -> None:
    assert plain("a\x1b[31mb\tc\nd\x00") == "a\\x1b[31mb\tc\nd\\x00"
    assert safe("[bold]x[/]") == "\\[bold]x\\[/]"


def test_a_newline_in_an_interface_name_stays_in_its_comment() -> None:
    lines = set_mtu("debian", "eth0\nrm -rf /")
    comment = lines[0]
    assert comment.startswith("# ") and "\n" not in comment
    assert all(not line.startswith("rm") for line in "\n".join(lines).splitlines())
