"""The setup of a cluster's nodes, from the controller: each node plans its own steps
(``halo setup --local`` on the node, through its client), all nodes at once; then, when asked,
every node with pending steps applies them, all at once. That is safe because each node's
steps change only that node; a node that fails does not stop the others, and is named.

A plan that did not come back from every node changes nothing anywhere (``require_plans``):
the plan names each machine before any is changed."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from halo_cluster.client.fanout import each
from halo_cluster.client.node import NodeClient, escaped
from halo_cluster.config import Config
from halo_cluster.errors import HaloError, SetupError
from halo_cluster.jsonout import JsonObject
from halo_cluster.setup.steps import SetupOptions
from halo_cluster.setup.targets import Machine, node_machine
from halo_cluster.wire import Setup, parse_setup, setup_args

PLAN_TIMEOUT_S = 120.0
APPLY_TIMEOUT_S = 900.0  # packages and a kernel command line on a slow mirror


@dataclass(frozen=True)
class NodeSetup:
    """One node's answer: its steps (after applying, when asked), or the error that came
    instead."""

    machine: Machine
    answer: Setup | None = None
    error: str | None = None

    @property
    def pending(self) -> list[str]:
        if self.answer is None:
            return []
        return [s.id for s in self.answer.steps if not s.done and s.commands]

    def to_dict(self) -> JsonObject:
        """The node's entry in ``halo setup --json`` (docs/setup.md)."""
        answer = self.answer
        return {
            **self.machine.to_dict(),
            "steps": [s.to_dict() for s in answer.steps] if answer else [],
            "reboot_needed": answer.reboot_needed if answer else False,
            "applied": list(answer.applied) if answer else [],
            "error": self.error,
        }


def plan_nodes(
    config: Config,
    clients: Mapping[str, NodeClient],
    names: Sequence[str],
    opts: SetupOptions,
    steps: Sequence[str],
) -> list[NodeSetup]:
    """Every named node's plan (nothing changes), asked of all nodes at once."""
    parts = _fabric_parts(config)
    return each(names, lambda name: _ask(config, clients[name], opts, steps, None, parts))


def apply_nodes(
    config: Config,
    clients: Mapping[str, NodeClient],
    plans: Sequence[NodeSetup],
    opts: SetupOptions,
    steps: Sequence[str],
) -> list[NodeSetup]:
    """The pending steps applied on every node that has any, all at once (a node with none
    keeps its plan). Ctrl-C lets the nodes already applying finish their step."""
    require_plans(plans)
    parts = _fabric_parts(config)

    def work(plan: NodeSetup) -> NodeSetup:
        if not plan.pending:
            return plan
        return _ask(config, clients[plan.machine.name], opts, steps, plan.machine, parts)

    return each(plans, work, settle=True)


def require_plans(plans: Sequence[NodeSetup]) -> None:
    """A SetupError naming the nodes whose plan did not come back: then nothing is applied."""
    failed = [p for p in plans if p.error is not None]
    if failed:
        first = failed[0].error
        names = ", ".join(p.machine.name for p in failed)
        raise SetupError(
            f"no plan from {names} ({first}): nothing was changed; fix that, or leave "
            "the node out by naming the others with --node"
        )


def _fabric_parts(config: Config) -> dict[str, str] | None:
    """Each node's part of a routed fabric as the JSON its setup is sent (the fabric built
    once for every node); None on a switched network."""
    mesh = config.mesh()
    if mesh is None:
        return None
    return {node.name: json.dumps(mesh.node(node.name).to_dict()) for node in config.nodes}


def _ask(
    config: Config,
    client: NodeClient,
    opts: SetupOptions,
    steps: Sequence[str],
    planned: Machine | None,
    parts: dict[str, str] | None,
) -> NodeSetup:
    """``setup --local`` on the node (its part of a routed fabric with it), applying when the
    node was ``planned`` already; a failure is the node's error, not the run's."""
    apply = planned is not None
    fabric = None if parts is None else parts[client.name]
    names = [(n.name, n.fabric_address) for n in config.nodes if n.fabric_address]
    args = setup_args(
        opts.distro, opts.mtu, steps, opts.fabric_iface, opts.address, apply=apply,
        fabric=fabric, names=names,
    )  # fmt: skip
    timeout = APPLY_TIMEOUT_S if apply else PLAN_TIMEOUT_S
    try:
        result = client.call(*args, timeout=timeout)
        if not result.ok:
            raise SetupError(f"setup failed: {escaped(result.error_text())}")
        answer = parse_setup(result.stdout)
    except HaloError as err:
        return NodeSetup(planned or node_machine(config, client.name, None), error=str(err))
    return NodeSetup(node_machine(config, client.name, answer.host), answer)
