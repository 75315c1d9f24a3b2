"""``halo env`` (the transport plan of this node) and ``halo verify-log`` (the proof)."""

from __future__ import annotations

import os
import shlex
import stat
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from halo_cluster.cli.options import choice_option, config_option, root_option
from halo_cluster.jsonout import emit_json
from halo_cluster.printable import printable

if TYPE_CHECKING:
    from halo_cluster.mesh import Fabric
    from halo_cluster.transport import TransportPlan
    from halo_cluster.witness.nccl_log import LogVerdict

TRANSPORT_CHOICES = ["auto", "infiniband", "roce", "ethernet", "thunderbolt"]


@click.command("env")
@root_option("Read the node below DIR.")
@choice_option(
    "--transport",
    "wanted",
    choices=TRANSPORT_CHOICES,
    default="auto",
    help="The transport wanted; anything but auto fails when this node cannot provide it.",
)
@click.option(
    "--peer",
    metavar="ADDR",
    help="IPv4 address of the other node: choose the port that reaches it.",
)
@choice_option(
    "--format",
    "fmt",
    choices=["shell", "json", "dotenv"],
    default="shell",
    help='shell: export lines for eval; dotenv: NAME="value" lines.',
)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option(
    "--explain", is_flag=True, help="Add each variable's reason (as comments in shell/dotenv)."
)
@click.option(
    "--node",
    metavar="NAME",
    help="This machine is NAME of a cluster cabled point to point (links in halo.toml): plan "
    "over its cables and identity, and say which cable reaches each peer (JSON: 'peers').",
)
@config_option("Cluster config for --node.")
def env_command(
    root: str,
    wanted: str,
    peer: str | None,
    fmt: str,
    as_json: bool,
    explain: bool,
    node: str | None,
    config_path: str | None,
) -> int:
    """Print the NCCL/RCCL, Gloo and vLLM environment this node needs, derived from its own
    facts. Use it as: eval "$(halo env --peer 192.168.100.2)"."""
    from halo_cluster.facts.inventory import collect_inventory
    from halo_cluster.transport import plan_transport

    inv = collect_inventory(root)
    peers = None
    if node is not None:
        fabric = _routed(config_path, node)
        plan = plan_transport(inv, wanted, None, fabric.node(node))
        peers = fabric.reach(node)
    else:
        plan = plan_transport(inv, wanted, peer)
    if as_json or fmt == "json":
        emit_json(plan.to_dict() if peers is None else {**plan.to_dict(), "peers": peers})
    else:
        sys.stdout.write(render_env(plan, fmt, explain, peers))
    for warning in plan.warnings:
        click.echo(f"halo: warning: {printable(warning)}", err=True)
    return 0


def _routed(config_path: str | None, node: str) -> Fabric:
    from halo_cluster.cli.options import require_config
    from halo_cluster.errors import UsageError

    config = require_config(config_path, "--node needs a cluster config: --config halo.toml")
    config.node(node)  # an unknown name is a usage error
    fabric = config.mesh()
    if fabric is None:
        raise UsageError(
            f"{config.path}: the nodes have no links (one switch): use --peer ADDRESS instead"
        )
    return fabric


def render_env(
    plan: TransportPlan,
    fmt: str,
    explain: bool,
    peers: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    lines = []
    if explain:
        lines.append(_comment(f"transport: {plan.reasons.get('transport', plan.transport)}"))
        lines += [_comment(f"warning: {w}") for w in plan.warnings]
        for name, how in (peers or {}).items():
            via = f", via {', '.join(how['via'])}" if how["via"] else ""
            hops = f"{how['hops']} hop{'s' if how['hops'] != 1 else ''}"
            lines.append(
                _comment(f"peer {name} ({how['identity']}): over {how['ifname']}, {hops}{via}")
            )
    for name, value in plan.env.items():
        if explain and name in plan.reasons:
            lines.append(_comment(f"{name}: {plan.reasons[name]}"))
        lines.append(
            f"export {name}={shlex.quote(value)}"
            if fmt == "shell"
            else f"{name}={dotenv_quote(value)}"
        )
    return "".join(line + "\n" for line in lines)


def _comment(text: str) -> str:
    """One comment line: what came from the node's files (an interface's name, a driver's)
    shown escaped, so no newline ends the comment and no escape reaches the terminal."""
    return "# " + printable(" ".join(text.split()))


def dotenv_quote(value: str) -> str:
    """Double-quoted, safe to ``source`` from bash: \\, ", $ and ` escaped; newlines as \\n."""
    for char in ("\\", '"', "$", "`"):
        value = value.replace(char, "\\" + char)
    return '"' + value.replace("\n", "\\n") + '"'


@click.command("verify-log")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option(
    "--expect",
    type=click.Choice(["roce", "infiniband", "rdma", "socket"]),
    help="The transport that should have run; exit 1 when the log shows another or a mix.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
def verify_log(files: tuple[str, ...], expect: str | None, as_json: bool) -> int:
    """Prove from NCCL/RCCL debug output (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET) which
    transport carried the data. FILE may be '-' for stdin; give every rank's log at once.

    Exit codes: 0 expectation met (or, without --expect, one transport found), 1 another
    transport or a mix, 3 no transport in the log at all."""
    from halo_cluster.witness.nccl_log import parse_logs

    verdict = parse_logs(_read_sources(files))
    code = verdict_exit_code(verdict, expect)
    if as_json:
        emit_json({**verdict.to_dict(), "expect": expect, "ok": code == 0})
    else:
        _render_verdict(verdict, expect, code)
    return code


def verdict_exit_code(verdict: LogVerdict, expect: str | None) -> int:
    """0 when the log proves what was expected; else the code of the error it amounts to."""
    from halo_cluster.errors import EXIT_CODES, NoTransportEvidence, TransportError

    if verdict.transport == "unknown":
        return EXIT_CODES[NoTransportEvidence]
    if expect is not None:
        return 0 if verdict.meets(expect) else EXIT_CODES[TransportError]
    return EXIT_CODES[TransportError] if verdict.transport == "mixed" else 0


MAX_LOG = 4 << 30  # a log that is not one (an endless pipe) stops being read here
MAX_LINE = 1 << 16  # longer lines are cut: no NCCL line is anywhere near


def _read_sources(files: tuple[str, ...]) -> list[tuple[str, Iterator[str]]]:
    """Each log as a stream of lines (never the whole file in memory)."""
    from halo_cluster.errors import UsageError

    sources: list[tuple[str, Iterator[str]]] = []
    for name in files:
        if name == "-":
            sources.append(("stdin", _lines(sys.stdin.buffer, "stdin")))
            continue
        try:
            handle = open(name, "rb")  # noqa: SIM115 (closed by _lines when exhausted)
        except OSError as err:
            raise UsageError(f"cannot read log {name}: {err.strerror or err}") from None
        mode = os.fstat(handle.fileno()).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISDIR(mode):
            handle.close()
            raise UsageError(f"cannot read log {name}: a device or directory, not a log")
        sources.append((name, _lines(handle, name)))
    return sources


def _lines(handle: BinaryIO, name: str) -> Iterator[str]:
    from halo_cluster.bounded.infile import size_text
    from halo_cluster.errors import UsageError

    read = 0
    try:
        while True:
            try:
                raw = handle.readline(MAX_LINE)
            except OSError as err:
                raise UsageError(f"cannot read log {name}: {err.strerror or err}") from None
            if not raw:
                return
            read += len(raw)
            if not raw.endswith(b"\n") and len(raw) == MAX_LINE:  # skip the rest of it
                while (more := handle.readline(MAX_LINE)) and not more.endswith(b"\n"):
                    read += len(more)
                    if read > MAX_LOG:
                        break
            if read > MAX_LOG:
                raise UsageError(
                    f"log {name}: more than {size_text(MAX_LOG)} read; give the ranks' logs "
                    "written with NCCL_DEBUG_SUBSYS=INIT,NET"
                )
            yield raw.decode("utf-8", "replace")
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()


def _render_verdict(verdict: LogVerdict, expect: str | None, code: int) -> None:
    """Everything from the log (the version, HCAs, networks, evidence) is data: ``safe``,
    so neither markup (``[/x]``) nor escapes in it act; only halo's own words are styled."""
    from halo_cluster.cli.output import console, safe

    out = console()
    colour = {0: "green", 1: "red", 3: "yellow"}[code]
    wanted = f" (expected {expect})" if expect else ""
    out.print(f"[bold {colour}]transport: {verdict.transport}[/]{wanted}")
    version = safe(verdict.nccl_version or "not in the log")
    out.print(f"NCCL/RCCL version: {version}; ranks seen: {verdict.ranks_seen}")
    hcas = safe(", ".join(verdict.hcas) or "none")
    out.print(f"HCAs: {hcas}; GPUDirect RDMA: {_tri(verdict.gdr)}")
    for process, network in verdict.networks.items():
        out.print(f"  {safe(process)}: Using network {safe(network)}")
    if verdict.evidence:
        out.print("evidence:")
        for line in verdict.evidence:
            out.print(f"  {safe(line)}")
    if code == 3:
        out.print(
            "no transport lines found: was the log written with "
            "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET?"
        )


def _tri(value: bool | None) -> str:
    return "unknown" if value is None else "yes" if value else "no"
