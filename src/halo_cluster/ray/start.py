"""What ``halo up`` runs where (pure): each node's ``ray start`` command line and
environment, what registration must show, and Ray's node table read back. The state file
is ``cluster.state``; running it all is ``ray.lifecycle``; the script a node runs is
``runner.quote.node_script``."""

from __future__ import annotations

import json
from collections.abc import Sequence

from halo_cluster.checks.context import NodeContext
from halo_cluster.config import Config, NodeConfig
from halo_cluster.errors import WireError
from halo_cluster.runner.result import Result
from halo_cluster.transport import TransportPlan
from halo_cluster.wire.answers import RayNode, parse_ray_nodes

START_TIMEOUT_S = 120.0
# The Ray resource a CPU-only node declares: one unit per engine rank it takes. halo's
# vLLM CPU adapter (engine/vllm_cpu_ray) makes it vLLM's device key on the CPU platform.
ENGINE_RESOURCE = "vllm_cpu"
REGISTER_TIMEOUT_S = 60.0


def ray_command(config: Config, node: NodeConfig) -> str:
    return config.ray.command or node.tool("ray")


def node_env(node: NodeConfig, plan: TransportPlan, ctx: NodeContext) -> dict[str, str]:
    env = dict(plan.env)
    if ctx.apus:
        # Ray's memory monitor reads unified memory as exhausted and kills workers.
        env["RAY_memory_monitor_refresh_ms"] = "0"
    env.update(dict(node.env))
    return env


def start_argv(
    config: Config, node: NodeConfig, head_address: str | None, gpus_found: int = 0
) -> list[str]:
    """``ray start`` for ``node``. GPUs are declared (``--num-gpus``): the configured count,
    else the GPUs the node's inventory found — Ray does not detect every iGPU by itself."""
    address = node.address
    argv = [
        ray_command(config, node),
        "start",
        f"--node-ip-address={address}",
        "--disable-usage-stats",
    ]
    if head_address is None:
        argv += [
            "--head",
            f"--port={config.ray.port}",
            f"--include-dashboard={str(config.ray.dashboard).lower()}",
        ]
        if config.ray.dashboard:
            argv.append(f"--dashboard-host={config.ray.dashboard_host}")
    else:
        argv.append(f"--address={head_address}:{config.ray.port}")
    gpus = node.gpus if node.gpus is not None else gpus_found
    if node.gpus == 0 or gpus:
        argv.append(f"--num-gpus={gpus}")
    if not gpus:
        argv.append(f"--resources={json.dumps({ENGINE_RESOURCE: 1})}")
    return argv


def expected_resources(node: NodeConfig, gpus_found: int) -> tuple[str, float]:
    """What registration must show for ``node``: its GPUs, or on a CPU-only node its
    engine rank (``ENGINE_RESOURCE``)."""
    gpus = node.gpus_used(gpus_found)
    return ("GPU", float(gpus)) if gpus else (ENGINE_RESOURCE, 1.0)


def registered(
    nodes: Sequence[RayNode], wanted: dict[str, tuple[str, str, float]]
) -> tuple[list[str], list[str]]:
    """(names registered with what they should have, what is missing — one phrase each)."""
    table = {n.address: n for n in nodes if n.alive}
    done, missing = [], []
    for address, (name, kind, amount) in wanted.items():
        entry = table.get(address)
        if entry is None:
            missing.append(name)
        elif float(entry.resources.get(kind, 0)) < amount:
            have = entry.resources.get(kind, 0)
            missing.append(f"{name} (registered with {have:g} {kind}, needs {amount:g})")
        else:
            done.append(name)
    return sorted(done), missing


def ray_table(result: Result) -> tuple[RayNode, ...]:
    """``ray-nodes``' answer; none when the head does not answer or answers garbage (Ray is
    then taken as not running there)."""
    if not result.ok:
        return ()
    try:
        return parse_ray_nodes(result.stdout)
    except WireError:
        return ()
