"""``halo demo``: exercises every capability halo has, on bundled example data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from halo_cluster.jsonout import JsonObject

if TYPE_CHECKING:
    from rich.console import Console

    from halo_cluster.capacity.estimate import Row
    from halo_cluster.cluster.doctor import DoctorReport
    from halo_cluster.facts.model import Inventory
    from halo_cluster.setup.step import Step
    from halo_cluster.transport import TransportPlan
    from halo_cluster.witness.nccl_log import LogVerdict

HEALTHY, MISCONFIGURED = "strix-e810", "strix-e810-misconfigured"
PEERS = {HEALTHY: "192.168.100.2", MISCONFIGURED: "192.168.100.1"}
LOGS = {"rccl-roce-2rank.log": "roce", "nccl-socket-fallback.log": "roce"}


@click.command()
@click.option(
    "--json", "as_json", is_flag=True, help="Print what the demo gathered as one JSON object."
)
@click.option(
    "--no-lab",
    is_flag=True,
    help="Skip the labs (the 2-node lab with Ray, the real engine and benchmarks; the 3-node "
    "mesh): the bundled data only.",
)
def demo(as_json: bool, no_lab: bool) -> int:
    """Run every capability on this machine and on the bundled example nodes (a Strix Halo +
    E810 node, healthy and misconfigured, and recorded RCCL/NCCL logs): inventory, doctor,
    transport plan, transport proof; then, as root, a 2-node lab serving a tiny model with
    the real engine (vLLM's CPU build) at TP=2, its evidence and the benchmarks, and a
    3-node lab cabled as a mesh without a switch (setup, doctor, llama.cpp over it), and a
    3-node lab serving two deployments and replicas behind one gateway with a key."""
    from halo_cluster.cli.demo_gateway import gateway_demo
    from halo_cluster.cli.demo_lab import lab_demo
    from halo_cluster.cli.demo_mesh import mesh_demo
    from halo_cluster.cli.output import console
    from halo_cluster.jsonout import emit_json

    gathered = gather()
    skipped: JsonObject = {"skipped": "--no-lab"}
    if as_json:
        labs: JsonObject = {"lab": skipped, "mesh": skipped, "gateway": skipped}
        if not no_lab:
            labs = {"lab": lab_demo(None), "mesh": mesh_demo(None), "gateway": gateway_demo(None)}
        emit_json({**gathered.to_dict(), **labs})
        return 0
    out = console()
    show(out, gathered)
    if not no_lab:
        lab_demo(out)
        mesh_demo(out)
        gateway_demo(out)
    return 0


@dataclass(frozen=True)
class SeedClaim:
    """What the link costs Llama-3.3-70B at TP=2 on two Strix Halo nodes (each link's
    planner row), and what adding a node does for a model split over llama.cpp RPC."""

    model: str
    collectives_per_token: int
    rows: dict[str, Row]  # link -> the planner's row
    nodes_added: list[str]

    def to_dict(self) -> JsonObject:
        return {
            "model": self.model,
            "collectives_per_token": self.collectives_per_token,
            "rows": {link: row.to_dict() for link, row in self.rows.items()},
            "nodes_added": list(self.nodes_added),
        }


@dataclass(frozen=True)
class Gathered:
    """Everything the demo finds on the bundled data, before it is shown or printed."""

    local: Inventory
    examples: dict[str, Inventory]
    plans: dict[str, TransportPlan]
    verdicts: dict[str, LogVerdict]
    doctors: dict[str, DoctorReport]
    setups: dict[str, list[Step]]
    seed: SeedClaim

    def to_dict(self) -> JsonObject:
        """The demo's --json object, the labs aside."""
        return {
            "plan": self.seed.to_dict(),
            "setup": {
                name: [step.to_dict() for step in steps] for name, steps in self.setups.items()
            },
            "doctor": {name: report.to_dict() for name, report in self.doctors.items()},
            "inventory": {
                "local": self.local.to_dict(),
                **{n: i.to_dict() for n, i in self.examples.items()},
            },
            "plans": {name: plan.to_dict() for name, plan in self.plans.items()},
            "verify_log": {
                name: {**v.to_dict(), "expect": LOGS[name], "ok": v.meets(LOGS[name])}
                for name, v in self.verdicts.items()
            },
        }


def gather() -> Gathered:
    from halo_cluster.cluster.doctor import doctor_local
    from halo_cluster.examples import example_log, example_root
    from halo_cluster.facts.inventory import collect_inventory
    from halo_cluster.setup.apply import current_steps
    from halo_cluster.setup.steps import SetupOptions
    from halo_cluster.transport import plan_transport
    from halo_cluster.witness.nccl_log import parse_log

    examples = {
        name: collect_inventory(str(example_root(name))) for name in (HEALTHY, MISCONFIGURED)
    }
    return Gathered(
        local=collect_inventory("/"),
        examples=examples,
        plans={name: plan_transport(inv, "auto", PEERS[name]) for name, inv in examples.items()},
        verdicts={name: parse_log(example_log(name)) for name in LOGS},
        doctors={name: doctor_local(str(example_root(name))) for name in (HEALTHY, MISCONFIGURED)},
        setups={
            name: current_steps(str(example_root(name)), SetupOptions(home="root"))
            for name in (HEALTHY, MISCONFIGURED)
        },
        seed=seed_claim(),
    )


def show(out: Console, gathered: Gathered) -> None:
    from halo_cluster.cli.inventory import render_inventory
    from halo_cluster.cli.transport import render_env

    local = gathered.local
    render_inventory(out, local, f"1. Inventory of this machine: {local.hostname or '?'}")
    render_inventory(
        out, gathered.examples[HEALTHY], "2. Inventory of the bundled Strix Halo + E810 node"
    )
    _show_doctor(out, gathered.doctors)
    _show_setup(out, gathered.setups)
    _show_capacity(out, gathered.seed)
    out.rule("[bold]6. Transport plan per node (halo env --explain)")
    for name, plan in gathered.plans.items():
        out.print(
            f"[bold]{name}[/] (peer {PEERS[name]}): [cyan]{plan.transport}[/] on {plan.rail.hca}, "
            f"GID index {plan.gid_index}, interface {plan.netdev}"
        )
        out.print(render_env(plan, "shell", explain=True), markup=False, end="")
        for warning in plan.warnings:
            out.print(f"[yellow]warning:[/] {warning}")
    out.rule("[bold]7. Proof of transport (halo verify-log --expect roce)")
    for name, verdict in gathered.verdicts.items():
        ok = verdict.meets(LOGS[name])
        mark = "[green]PASS[/]" if ok else "[red]FAIL[/]"
        out.print(
            f"{mark} {name}: transport {verdict.transport}, networks {dict(verdict.networks)}, "
            f"NCCL/RCCL {verdict.nccl_version}"
        )
        if not ok:
            out.print("     RDMA was wanted but the log shows another transport; evidence:")
            for line in verdict.evidence[:4]:
                out.print(f"       {line}", markup=False)


def _show_doctor(out: Console, doctors: dict[str, DoctorReport]) -> None:
    from halo_cluster.checks import summarize
    from halo_cluster.cli.doctor import render_report
    from halo_cluster.cluster.doctor import DoctorReport

    out.rule("[bold]3. Preflight (halo doctor): healthy vs misconfigured Strix Halo node")
    healthy, broken = doctors[HEALTHY], doctors[MISCONFIGURED]
    out.print(f"{HEALTHY}: {summarize(healthy.all_findings())} -> exit {healthy.exit_code(False)}")
    out.print(
        f"{MISCONFIGURED}: {summarize(broken.all_findings())} -> exit {broken.exit_code(False)}"
    )
    good = {f.check for f in healthy.all_findings() if f.severity == "ok"}
    changed = [
        f for f in broken.all_findings() if f.check in good and f.severity in ("warn", "fail")
    ]
    out.print(f"{len(changed)} checks that pass on {HEALTHY} fail or warn on {MISCONFIGURED}:")
    render_report(out, DoctorReport({MISCONFIGURED: changed}, []))


def _show_setup(out: Console, setups: dict[str, list[Step]]) -> None:
    from rich.markup import escape

    out.rule("[bold]4. Host setup as code (halo setup): what the misconfigured node still needs")
    for name, steps in setups.items():
        pending = [step for step in steps if not step.done]
        out.print(f"[bold]{name}[/]: {len(steps) - len(pending)} of {len(steps)} steps done")
        for step in pending:
            reboot = " [yellow](reboot)[/]" if step.reboot else ""
            out.print(f"  {step.id}: {escape(step.title)}{reboot}")
            for action in step.actions:
                out.print("    " + escape(action.display().rstrip()).replace("\n", "\n    "))


def seed_claim() -> SeedClaim:
    """Llama-3.3-70B at TP=2 on two Strix Halo nodes: what the link costs per token."""
    from halo_cluster.capacity.catalog import find_hardware, find_link, find_model
    from halo_cluster.capacity.estimate import Request, evaluate, tp_collectives_per_token

    model, hardware = find_model("llama-3.3-70b"), find_hardware("strix-halo-128")
    rows = {
        link: evaluate(Request(model, hardware, find_link(link)), 2, 1) for link in ("roce", "tcp")
    }
    from itertools import pairwise

    from halo_cluster.capacity.engines import find_engine
    from halo_cluster.capacity.estimate import node_steps, step_sentence

    # "should I add a node?": Qwen3-30B-A3B Q4_K_M over llama.cpp RPC on 5 GbE, 1 to 3 nodes
    split = Request(find_model("qwen3-30b-a3b"), hardware, find_link("5gbe"), nodes=3,
                    quant="Q4_K_M", engine=find_engine("llama.cpp"), batch=4)  # fmt: skip
    steps = node_steps(split)
    return SeedClaim(
        model.id,
        tp_collectives_per_token(model),
        rows,
        [step_sentence(b, a, 4, "5gbe") for a, b in pairwise(steps)],
    )


def _show_capacity(out: Console, seed: SeedClaim) -> None:
    out.rule("[bold]5. The fabric question (halo plan llama-3.3-70b): what 70 µs vs 5 µs costs")
    roce, tcp = seed.rows["roce"], seed.rows["tcp"]
    count = seed.collectives_per_token
    out.print(
        f"{seed.model} BF16, TP=2 on 2 × Strix Halo: {count} all-reduces per token; network "
        f"{tcp.decode_ms_network:.1f} ms/token over TCP (68 µs) vs "
        f"{roce.decode_ms_network:.1f} ms over RoCE (5.2 µs); "
        f"{tcp.tokens_per_s:.2f} vs {roce.tokens_per_s:.2f} tok/s "
        f"(memory-bound compute {roce.decode_ms_compute:.0f} ms/token)"
    )
    from rich.markup import escape

    out.print("Should I add a node? Qwen3-30B-A3B Q4_K_M, llama.cpp RPC over 5 GbE:")
    for line in seed.nodes_added:
        out.print(f"  {escape(line)}")
