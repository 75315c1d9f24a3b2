"""``halo status``: which nodes answer and run Ray, each node's transport, and the served
model's health. The server is asked on the head (/health); a member it lost makes it
unhealthy whatever /health says: for an engine on Ray a member whose Ray is gone, for the
others a member whose served process (the pid file 'halo serve' wrote) is gone."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from halo_cluster.checks.memory_owners import GIB_KIB, NAMED_SHARE, how_to_stop, parse_owners
from halo_cluster.client.fanout import each
from halo_cluster.cluster.handle import Cluster
from halo_cluster.cluster.state import ClusterState, ServedState, read_state
from halo_cluster.config import NodeConfig, secret
from halo_cluster.engines import process, scripts
from halo_cluster.engines.protocol import find_engine
from halo_cluster.errors import UsageError
from halo_cluster.jsonout import JsonObject
from halo_cluster.ray.lifecycle import Lifecycle
from halo_cluster.supervise import control
from halo_cluster.supervision import count, key_values
from halo_cluster.wire.args import serve_health_args
from halo_cluster.wire.commands import SERVE_KEY_ENV


def cluster_status(cluster: Cluster) -> dict[str, Any]:
    config = cluster.config
    ray = Lifecycle(cluster)
    state = read_state(config)
    with ThreadPoolExecutor(1, thread_name_prefix="halo-memory") as pool:
        held = pool.submit(memory_view, cluster)
        raylets, alive = ray_view(ray)
        memory = held.result()
    plans = state.plans() if state else {}
    nodes = []
    for node in config.nodes:
        plan = plans.get(node.name)
        nodes.append(
            {
                "name": node.name,
                "address": node.address,
                "ray": node.address in alive and bool(raylets[node.name]),
                "reachable": raylets[node.name] is not None,
                "transport": plan.transport if plan else None,
                "hca": plan.rail.hca if plan else None,
                "memory": memory[node.name],
            }
        )
    started = state.ray_started_at if state else None
    return {
        "serve": serve_health(cluster, state, nodes),
        "cluster": config.name,
        "head": config.head.name,
        "nodes": nodes,
        "up_s": round(time.time() - started, 1) if started and alive else None,
    }


def memory_view(cluster: Cluster) -> dict[str, JsonObject | None]:
    """Each node's memory and the processes that hold at least ``NAMED_SHARE`` of it, the
    largest first, halo's and others' (with how to stop them; None: the node did not answer
    within 15 s)."""

    def ask(node: NodeConfig) -> JsonObject | None:
        result = cluster.client(node).script(scripts.memory_script(), 15)
        if not result.ok:
            return None
        said = key_values(result.stdout)
        total, available = count(said.get("mem_total_kib")), count(said.get("mem_available_kib"))
        if not total:
            return None
        owners = sorted(parse_owners(result.stdout), key=lambda o: o.held_kib, reverse=True)
        return {
            "total_gib": round(total / GIB_KIB, 1),
            "available_gib": None if available is None else round(available / GIB_KIB, 1),
            "owners": [
                {
                    **o.to_dict(),
                    "share_pct": round(100 * o.held_kib / total),
                    "stop": None if o.halo else how_to_stop(o),
                }
                for o in owners
                if o.held_kib >= NAMED_SHARE * total
            ],
        }

    nodes = list(cluster.config.nodes)
    return dict(zip([n.name for n in nodes], each(nodes, ask), strict=True))


def ray_view(ray: Lifecycle) -> tuple[dict[str, bool | None], set[str]]:
    """Each node's raylet (None: no answer), and the addresses Ray's table on the head
    reports alive. The head is asked first; where its raylet runs, its table is read while
    the other nodes are asked (Ray's table is the head's: without its raylet there is none)."""
    config = ray.config
    head = config.head
    raylets = ray.raylets([head])
    others = [n for n in config.nodes if n is not head]
    if not raylets[head.name]:
        return {**raylets, **ray.raylets(others)}, set()
    with ThreadPoolExecutor(1, thread_name_prefix="halo-ray-table") as pool:
        table = pool.submit(ray.alive)
        raylets.update(ray.raylets(others))
        return {n.name: raylets[n.name] for n in config.nodes}, set(table.result())


def serve_health(
    cluster: Cluster, state: ClusterState | None, nodes: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The server's health and the members it lost; None when no server was started and
    none is configured."""
    config, head = cluster.config, cluster.head
    served = state.serve if state else None
    if served is None and not config.serve.model:
        return None
    served = served or ServedState(nodes=[])
    host = served.host or config.serve.host
    port = served.port or config.serve.port
    local = scripts.local_host(host)
    env = {SERVE_KEY_ENV: secret(config.serve.api_key_env) or ""}
    result = cluster.client(head).call(*serve_health_args(local, port), env=env, timeout=15)
    lost = _lost(cluster, served, nodes)
    detail = result.stdout.strip() if result.ok else result.error_text()
    if lost:
        detail = f"lost {', '.join(lost)}" + ("" if result.ok else f"; {detail}")
    return {
        "endpoint": f"http://{local}:{port}",
        "healthy": result.ok and not lost,
        "detail": detail,
        "model": served.model or config.serve.model,
        "executor": served.executor,
        "engine": served.engine,
        "ranks": served.ranks,
        "proven": served.proven,
        "lost": lost,
        "supervisor": supervisor_summary(control.status(cluster)),
    }


HISTORY_SHOWN = 10


def supervisor_summary(
    found: control.SupervisorStatus | None, now: float | None = None
) -> dict[str, Any] | None:
    """The supervisor's state as ``halo status`` shows it: the state, whether its process
    runs, uptime of the current serving spell, restarts, the last cause, the last probe and
    the latest state changes. A supervisor that is not running shows as such, whatever its
    file last said."""
    if found is None:
        return None
    now = time.time() if now is None else now
    known = found.state
    state = known.state if known is not None else "unknown"
    if not found.running and state not in ("stopped", "failed"):
        state = "not running"
    if known is None:
        return {"state": state, "running": found.running, "cause": found.problem}
    since, probe = known.serving_since, known.last_probe
    return {
        "state": state,
        "running": found.running,
        "uptime_s": round(now - since, 1) if since is not None else None,
        "restarts": known.restarts,
        "attempts": known.attempts,
        "cause": known.cause,
        "probe_latency_s": probe.latency_s if probe else None,
        "probe_at": probe.at if probe else None,
        "nodes": known.nodes,
        "history": [c.to_dict() for c in known.history[-HISTORY_SHOWN:]],
    }


def _watches_ray(served: ServedState) -> bool:
    """Whether the served engine's members are lost with their Ray; an engine this halo does
    not know (served by another) is judged by its processes."""
    try:
        return find_engine(served.engine).watches_ray(served.executor)
    except UsageError:
        return False


def _lost(cluster: Cluster, served: ServedState, nodes: list[dict[str, Any]]) -> list[str]:
    members = set(served.nodes)
    if _watches_ray(served):
        return [
            n["name"] for n in nodes if n["name"] in members and not (n["reachable"] and n["ray"])
        ]
    workers = [n for n in nodes if n["name"] in members and n["name"] != cluster.head.name]

    def gone(member: dict[str, Any]) -> bool:
        if not member["reachable"]:
            return True
        return not process.alive(cluster.client(member["name"]), cluster.config.name, timeout=8)

    return [m["name"] for m, dead in zip(workers, each(workers, gone), strict=True) if dead]
