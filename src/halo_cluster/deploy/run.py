"""``halo run MODEL --name NAME``: add or replace one deployment, the others left serving.

1. the model located once (``recipes.tune.locate_model``); the name (default: the model's
   store name) checked;
2. the nodes: the groups ``--nodes`` names, else ``--replicas`` groups of the layout's
   size from the nodes no other deployment uses (``groups``); the layout: ``--layout``, else
   'halo run''s choice on one group's nodes (the latest tune's winner, else the planner's);
3. a deployment of that name already served is stopped first; every replica's port is one
   its nodes do not serve on yet;
4. the deployment written to the state file before anything starts (so 'halo stop NAME'
   finds what a cut-short run left), the model copied to every replica's nodes;
5. each replica served as its own unit (``units``): the one bring-up, supervised and proven
   by every witness, its tokens against the engine's one-node reference for this model
   (recorded first on the replica's first node when there is none);
6. the gateway told (``gateway.control.sync``) when it runs.

A replica the witnesses refuse is stopped and reported; the others keep serving."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from halo_cluster.cluster.deployments import (
    Deployment,
    Replica,
    held_gib,
    name_problem,
    serve_address,
)
from halo_cluster.cluster.handle import Cluster
from halo_cluster.cluster.state import new_state, read_state, write_state
from halo_cluster.deploy.groups import free_groups, parse_groups, place
from halo_cluster.deploy.stop import stop_replicas
from halo_cluster.deploy.units import provide_worker_key, unit_cluster
from halo_cluster.engines.layout import Layout
from halo_cluster.engines.protocol import find_engine
from halo_cluster.errors import HaloError, UsageError
from halo_cluster.gateway import control as gateway
from halo_cluster.jsonout import JsonObject
from halo_cluster.recipes.layouts import one_node, parse_layout
from halo_cluster.recipes.predict import ModelFiles
from halo_cluster.recipes.run import choose
from halo_cluster.recipes.tune import LocatedModel, copy_model, locate_model
from halo_cluster.serving.bringup import Serving
from halo_cluster.serving.reference import find_reference, save_reference


@dataclass(frozen=True)
class DeployRequest:
    source: str  # a model directory or GGUF here, a Hugging Face id, a name of the stores
    name: str | None = None
    nodes: str | None = None  # "a,b" or "a+b,c+d"
    replicas: int | None = None
    layout: str | None = None
    engine: str | None = None
    wait_s: float = 900.0


@dataclass
class ReplicaResult:
    index: int
    nodes: list[str]
    url: str
    proven: str | None = None
    stopped: bool = False
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> JsonObject:
        return dataclasses.asdict(self)


@dataclass
class DeployResult:
    name: str
    model: str
    engine: str
    layout: str
    reason: str
    replaced: bool = False
    replicas: list[ReplicaResult] = field(default_factory=list)
    gateway: JsonObject | None = None

    @property
    def state(self) -> str:
        up = sum(not r.stopped for r in self.replicas)
        return "serving" if up == len(self.replicas) else "degraded" if up else "failed"

    def to_json(self) -> JsonObject:
        return {
            "name": self.name,
            "model": self.model,
            "engine": self.engine,
            "layout": self.layout,
            "reason": self.reason,
            "replaced": self.replaced,
            "state": self.state,
            "replicas": [r.to_dict() for r in self.replicas],
            "gateway": self.gateway,
        }


def deploy(
    cluster: Cluster, request: DeployRequest, results: Path, progress: Callable[[str], None]
) -> DeployResult:
    config = cluster.config
    if request.replicas is not None and not 1 <= request.replicas <= len(config.nodes):
        raise UsageError(
            f"--replicas {request.replicas}: the cluster has {len(config.nodes)} node(s)"
        )
    located = locate_model(cluster, request.source, progress)
    files = located.files
    name = request.name or files.name
    problem = name_problem(name)
    if problem is not None:
        raise UsageError(f"--name {name!r}: {problem}")
    state = read_state(config) or new_state(config)
    old = state.deployment(name)
    others = [d for d in state.deployments if d.name != name]
    layout, reason, groups = _layout_and_groups(cluster, files, request, others, results)
    progress(f"deployment {name}: {layout.name} x{len(groups)} ({reason})")
    kept = _unchanged(cluster, old, files, layout, groups)
    if kept is not None:
        return kept
    if old is not None:
        progress(f"deployment {name}: stopping the replicas it had")
        stop_replicas(cluster, old)
    deployment = Deployment(
        name, files.name, layout.engine, layout.name, place(groups, others, config.serve.port),
        files.served_path(layout.engine, config.models.dir), time.time(),
        config.gateway.aliases_of(name),
    )  # fmt: skip
    state.deployments = [*others, deployment]
    write_state(config, state)  # before anything starts: 'halo stop NAME' finds it
    out = DeployResult(name, files.name, layout.engine, layout.name, reason, old is not None)
    _copy(cluster, located, deployment, progress)
    provide_worker_key(config)
    served = []
    for replica in deployment.replicas:
        held = held_gib(others, replica.nodes)
        result, memory = _serve(cluster, deployment, replica, layout, files, request.wait_s, held)
        out.replicas.append(result)
        served.append(dataclasses.replace(replica, memory_gib=memory))
    _record(cluster, dataclasses.replace(deployment, replicas=tuple(served)))
    out.gateway = gateway.sync(cluster).to_dict()
    return out


def _record(cluster: Cluster, deployment: Deployment) -> None:
    """The deployment as served (each replica's memory) in the state file."""
    state = read_state(cluster.config) or new_state(cluster.config)
    state.deployments = [deployment if d.name == deployment.name else d for d in state.deployments]
    write_state(cluster.config, state)


def _unchanged(
    cluster: Cluster,
    old: Deployment | None,
    files: ModelFiles,
    layout: Layout,
    groups: list[tuple[str, ...]],
) -> DeployResult | None:
    """The deployment as it runs, when it is this model and layout on these nodes and every
    replica serves: nothing is copied, started or stopped (None: it is to be served)."""
    from halo_cluster.deploy.view import deployments_view

    if old is None or (old.model, old.layout) != (files.name, layout.name):
        return None
    if [r.nodes for r in old.replicas] != groups:
        return None
    found = next((d for d in deployments_view(cluster) if d.name == old.name), None)
    if found is None or found.state != "serving":
        return None
    out = DeployResult(old.name, old.model, old.engine, old.layout, "already serving")
    for replica in found.replicas:
        out.replicas.append(
            ReplicaResult(replica.index, replica.nodes, replica.url, replica.proven)
        )
    out.gateway = gateway.sync(cluster).to_dict()
    return out


def narrowed(cluster: Cluster, names: list[str] | tuple[str, ...]) -> Cluster:
    """The cluster as these nodes alone (its name kept: the tune results are its own)."""
    config = cluster.config
    nodes = tuple(config.node(n) for n in names)
    clients = {n: cluster.clients[n] for n in names}
    return Cluster(dataclasses.replace(config, nodes=nodes), clients, cluster.progress)


def _layout_and_groups(
    cluster: Cluster,
    files: ModelFiles,
    request: DeployRequest,
    others: list[Deployment],
    results: Path,
) -> tuple[Layout, str, list[tuple[str, ...]]]:
    names = [n.name for n in cluster.config.nodes]
    replicas = request.replicas or 1
    if request.nodes:
        groups = parse_groups(request.nodes, names, request.replicas)
        layout, reason, _ = choose(
            narrowed(cluster, groups[0]), files, request.layout, request.engine, results
        )
        if layout.nodes != len(groups[0]):
            raise UsageError(
                f"{layout.name} runs on {layout.nodes} node(s) but each replica is given "
                f"{len(groups[0])}: give --layout, or --nodes with {layout.nodes} per replica"
            )
        return layout, reason, groups
    used = {n for d in others for n in d.nodes()}
    free = [n for n in names if n not in used]
    if request.layout:
        layout = parse_layout(request.layout, len(names))
        reason = "the layout asked for (--layout)"
    else:
        per = len(free) // replicas
        if per < 1:
            free_groups(names, others, 1, replicas)  # the one line that says why
        layout, reason, _ = choose(
            narrowed(cluster, free[:per]), files, None, request.engine, results
        )
    return layout, reason, free_groups(names, others, layout.nodes, replicas)


def _copy(
    cluster: Cluster,
    located: LocatedModel,
    deployment: Deployment,
    progress: Callable[[str], None],
) -> None:
    nodes = [n.name for n in cluster.config.nodes if n.name in deployment.nodes()]
    copy_model(narrowed(cluster, nodes), located, progress)


def _serve(
    cluster: Cluster,
    deployment: Deployment,
    replica: Replica,
    layout: Layout,
    files: ModelFiles,
    wait_s: float,
    held: dict[str, float],
) -> tuple[ReplicaResult, tuple[tuple[str, float], ...]]:
    """One replica served as its unit, and what it was checked to need on each node (GiB);
    a start that fails is this replica's problem. ``held``: what other deployments hold on
    its nodes, for the memory check."""
    from halo_cluster.engines.request import serve_request

    unit = unit_cluster(cluster, deployment.name, replica)
    address = serve_address(cluster.config.node(replica.nodes[0]))
    out = ReplicaResult(replica.index, list(replica.nodes), replica.url(address))
    cluster.progress(f"deployment {deployment.name}: replica {replica.index} on "
                     f"{'+'.join(replica.nodes)} at {out.url}")  # fmt: skip
    serving = Serving(unit)
    model = files.served[layout.engine]
    named = find_engine(layout.engine).named(deployment.name)  # the model id the router routes
    try:
        mode = _reference(cluster, unit, serving, layout, model, deployment.served, wait_s)
        result = serving.start(
            serve_request(
                unit.config, model=model, reference=mode, wait_s=wait_s, extra=named,
                held=held, **layout.serve_args(),
            )
        )  # fmt: skip
    except HaloError as err:
        serving.stop()
        out.stopped, out.problems = True, [str(err)]
        return out, ()
    if mode == "record":  # this replica's answers are the engine's reference from now on
        found = find_reference(unit.config, layout.engine, deployment.served)
        if found is not None:
            save_reference(cluster.config, found)
    out.proven, out.stopped, out.problems = result.proven, result.stopped, list(result.problems)
    memory = tuple(
        (node, float(need))
        for node, row in result.memory.items()
        if isinstance(need := row.get("need_gib"), (int, float))
    )
    return out, memory


def _reference(
    cluster: Cluster,
    unit: Cluster,
    serving: Serving,
    layout: Layout,
    model: str,
    opened: str,
    wait_s: float,
) -> str:
    """The token witness's mode for this replica: 'full' against the cluster's reference
    for this engine and model (given to the unit), else 'record' on a one-node layout, else
    the reference recorded first on the replica's first node."""
    from halo_cluster.engines.request import serve_request

    known = find_reference(cluster.config, layout.engine, opened)
    if known is not None:
        save_reference(unit.config, known)
        return "full"
    if layout.nodes == 1:
        return "record"
    one = one_node(layout.engine)
    if one is None:
        return "auto"
    cluster.progress(f"recording the one-node token reference first ({layout.engine})")
    first = serving.start(
        serve_request(
            unit.config, model=model, supervise=False, reference="record", wait_s=wait_s,
            **one.serve_args(),
        )
    )  # fmt: skip
    serving.stop()
    if first.stopped:
        raise HaloError(f"the one-node reference did not come up: {'; '.join(first.problems)}")
    found = find_reference(unit.config, layout.engine, opened)
    if found is not None:
        save_reference(cluster.config, found)
    return "full"
