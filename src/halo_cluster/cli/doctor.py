"""``halo doctor``: preflight this node or every node of the cluster, with the fix for each."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from halo_cluster.cli.options import config_option
from halo_cluster.cli.output import dash, styled, table
from halo_cluster.jsonout import emit_json

if TYPE_CHECKING:
    from rich.console import Console

    from halo_cluster.checks import Finding
    from halo_cluster.cluster.doctor import DoctorReport

COLOURS = {"fail": "red", "warn": "yellow", "info": "cyan", "ok": "green"}


@click.command()
@click.option(
    "--root", metavar="DIR", help="Check the node whose files are below DIR (no cluster checks)."
)
@config_option()
@click.option(
    "--node", "names", multiple=True, metavar="NAME", help="Only these nodes (repeatable)."
)
@click.option(
    "--transport",
    type=click.Choice(["auto", "infiniband", "roce", "ethernet", "thunderbolt"]),
    help="Transport to check for (default: the config's, else auto).",
)
@click.option("--json", "as_json", is_flag=True, help="Print {nodes, cluster, summary} as JSON.")
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too.")
def doctor(
    root: str | None,
    config_path: str | None,
    names: tuple[str, ...],
    transport: str | None,
    as_json: bool,
    strict: bool,
) -> int:
    """Find what would break or slow the cluster before anything starts: RDMA ports and GIDs,
    MTU, PCIe, kernel settings, GPU memory, device nodes, limits, firewall; and across nodes
    reachability, subnets, MTU, transports and versions. Exit 1 when a check fails."""
    report = _run(root, config_path, list(names), transport, as_json)
    if as_json:
        emit_json(report.to_dict())
    else:
        from halo_cluster.cli.output import console

        render_report(console(), report)
    return report.exit_code(strict)


def _run(
    root: str | None, config_path: str | None, names: list[str], transport: str | None, quiet: bool
) -> DoctorReport:
    from halo_cluster.client.node import ssh_clients
    from halo_cluster.cluster.doctor import doctor_cluster, doctor_local
    from halo_cluster.config import find_config, load_config

    path = None if root else find_config(config_path)
    if path is None:
        return doctor_local(root or "/", transport or "auto")
    config = load_config(path)
    if transport:
        from dataclasses import replace

        config = replace(config, transport=transport)
    count = len(names) or len(config.nodes)
    if not quiet:
        click.echo(f"gathering facts from {count} node(s) over SSH ({path})…", err=True)

    def progress(name: str) -> None:
        if not quiet:
            click.echo(f"  {name}: done", err=True)

    return doctor_cluster(config, ssh_clients(config), names, progress)


def render_report(out: Console, report: DoctorReport) -> None:
    from halo_cluster.checks import summarize, worst_first

    for name, findings in report.nodes.items():
        if findings:
            out.print(_findings_table(f"Node {name}", worst_first(findings)))
    if report.cluster:
        out.print(_findings_table("Cluster", worst_first(report.cluster)))
    counts = summarize(report.all_findings())
    out.print(" ".join(f"[{COLOURS[k]}]{v} {k}[/]" for k, v in counts.items()))
    sys.stdout.flush()


def _findings_table(title: str, findings: list[Finding]) -> object:
    grid = table(title, "", "check", "finding", "fix")
    for f in findings:
        colour = COLOURS[f.severity]
        summary = (
            f.summary + "".join(f"\n  {e}" for e in f.evidence if e)
            if f.severity != "ok"
            else f.summary
        )
        grid.add_row(
            styled(f"[{colour}]{f.severity.upper()}[/]"),
            f.check,
            summary,  # data: the table shows it as it is
            "\n".join(f.fix) or dash(None),
        )
    return grid
