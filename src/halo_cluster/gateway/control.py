"""The gateway on the head, from the controller: ``start`` (the router on the head's
loopback, then the key gate in front of it at ``[gateway] host:port``, then every replica
registered), ``sync`` (the gate's files and the router's workers made to match the
deployments, after every 'halo run --name' and 'halo stop NAME'), ``stop`` and ``view``.

Both processes run with ``[gateway] python`` (default: the Python running halo, which holds
the ``gateway`` extra), detached with a log and a pid file like an engine's. Nothing secret
is in argv: the gate reads the keys' hashes from a 0600 file and the worker key from its
environment."""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from halo_cluster.bounded.jsonin import loads
from halo_cluster.cluster.deployments import Deployment, serve_address
from halo_cluster.cluster.handle import Cluster
from halo_cluster.cluster.state import read_state
from halo_cluster.config import Config
from halo_cluster.engines import process, scripts
from halo_cluster.engines.start import Ready, launch
from halo_cluster.errors import LifecycleError, ParseError
from halo_cluster.gateway import scripts as gw
from halo_cluster.gateway.keys import UsageFile, parse_usage, read_keys
from halo_cluster.gateway.models_file import ModelEntry, ModelsFile
from halo_cluster.gateway.worker_key import WORKER_KEY_ENV, worker_key
from halo_cluster.jsonout import JsonObject

READY_S = 60
# the router's health checks: every 2 s, each given 5 s (a replica busy with a full batch on a
# loaded CPU answers /health late: 2 s took the one replica of a deployment out under load,
# every request then 503), out after 2 failures: a dead replica (refused at once) within ~4 s
HEALTH_INTERVAL_S = 2
HEALTH_TIMEOUT_S = 5
HEALTH_FAILURES = 2
# its circuit breaker opens after 10 failed sends to a replica; closed again after 5 s, not
# its default 60 s: the one replica of a deployment is not shut out for a minute by a burst of
# send errors under load (the health checks take a dead replica out)
BREAKER_OPEN_S = 5


def keys_path(config: Config) -> Path:
    """The gateway's keys (hashed) on the controller: the cluster's state directory."""
    return config.path.parent / ".halo" / f"{config.name}.keys.json"


def python_of(config: Config) -> str:
    return config.gateway.python or sys.executable


def url_of(config: Config) -> str:
    host = config.gateway.host
    host = config.head.host if host == "0.0.0.0" else host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{config.gateway.port}"


def models_file(config: Config, deployments: list[Deployment]) -> ModelsFile:
    """What the gate answers /v1/models with, and the aliases it rewrites."""
    return ModelsFile(
        tuple(
            ModelEntry(
                d.name,
                tuple(sorted({*d.aliases, *config.gateway.aliases_of(d.name)})),
                d.engine,
                len(d.replicas),
            )
            for d in deployments
        )
    )


def wanted_workers(config: Config, deployments: list[Deployment]) -> list[dict[str, str]]:
    return [
        {"url": r.url(serve_address(config.node(r.nodes[0]))), "model_id": d.name}
        for d in deployments
        for r in d.replicas
    ]


def router_argv(config: Config) -> list[str]:
    g = config.gateway
    return [
        python_of(config), "-m", "vllm_router.launch_router",
        "--host", "127.0.0.1", "--port", str(g.router_port), "--enable-igw",
        "--policy", "power_of_two",
        "--prometheus-host", g.metrics_host, "--prometheus-port", str(g.metrics_port),
        "--health-check-interval-secs", str(HEALTH_INTERVAL_S),
        "--health-failure-threshold", str(HEALTH_FAILURES),
        "--health-check-timeout-secs", str(HEALTH_TIMEOUT_S),
        "--cb-timeout-duration-secs", str(BREAKER_OPEN_S),
        "--log-level", "warning",
    ]  # fmt: skip


def gate_argv(config: Config, state_dir: str) -> list[str]:
    g, name = config.gateway, config.name
    return [
        python_of(config), "-m", "halo_cluster.gateway.gate",
        "--host", g.host, "--port", str(g.port),
        "--upstream", f"http://127.0.0.1:{g.router_port}",
        "--keys", gw.file_path(state_dir, name, "keys"),
        "--usage", gw.file_path(state_dir, name, "usage"),
        "--models", gw.file_path(state_dir, name, "models"),
    ]  # fmt: skip


@dataclass
class GatewayView:
    url: str
    running: bool
    router: bool
    gate: bool
    workers: list[JsonObject] = field(default_factory=list)
    problem: str | None = None

    def to_dict(self) -> JsonObject:
        return {
            "url": self.url,
            "running": self.running,
            "router": self.router,
            "gate": self.gate,
            "workers": list(self.workers),
            "problem": self.problem,
        }


def head_state_dir(cluster: Cluster) -> str:
    """halo's state directory on the head, expanded there."""
    found = cluster.client(cluster.head).script(gw.state_dir_script())
    path = found.stdout.strip()
    if not found.ok or not path.startswith("/"):
        raise LifecycleError(f"{cluster.head.name}: no state directory: {found.error_text()}")
    return path


def push_files(cluster: Cluster, deployments: list[Deployment]) -> None:
    """The keys' hashes and the models list, written 0600 on the head for the gate."""
    config = cluster.config
    where = head_state_dir(cluster)
    files = {
        gw.file_path(where, config.name, "keys"): read_keys(keys_path(config)).to_json(),
        gw.file_path(where, config.name, "models"): models_file(config, deployments).to_json(),
    }
    written = cluster.client(cluster.head).script(gw.write_files_script(files))
    if not written.ok:
        raise LifecycleError(
            f"{cluster.head.name}: could not write the gateway's files: {written.error_text()}"
        )


def start(cluster: Cluster) -> GatewayView:
    """Start the gateway on the head (a running one is left as it is), then sync it."""
    config, head = cluster.config, cluster.head
    client = cluster.client(head)
    state = read_state(config)
    deployments = state.deployments if state else []
    if not _alive(cluster, gw.ROUTER) or not _alive(cluster, gw.GATE):
        _check_python(cluster)
        stop(cluster)
        push_files(cluster, deployments)
        key = worker_key(config)
        g = config.gateway
        router = launch(
            head.name, "vllm-router", router_argv(config), {},
            f"starting vllm-router on {head.name} (127.0.0.1:{g.router_port})",
            Ready("127.0.0.1", g.router_port, READY_S),
        )  # fmt: skip
        gate = launch(
            head.name, "the key gate", gate_argv(config, head_state_dir(cluster)),
            {WORKER_KEY_ENV: key},
            f"starting the key gate on {head.name} ({g.host}:{g.port})",
            Ready(scripts.local_host(g.host), g.port, READY_S),
        )  # fmt: skip
        for one, role in ((router, gw.ROUTER), (gate, gw.GATE)):
            started = client.script(one.script(gw.process_name(config.name, role)), 60)
            if not started.ok:
                raise LifecycleError(f"could not start {one.role}: {started.error_text()}")
            _wait_ready(cluster, one.ready, role, one.role)  # type: ignore[arg-type]
    return sync(cluster)


def sync(cluster: Cluster) -> GatewayView:
    """The gate's files and the router's workers made to match the deployments (nothing
    when the gateway is not running)."""
    config = cluster.config
    state = read_state(config)
    deployments = state.deployments if state else []
    view = _view(cluster, wanted_workers(config, deployments) if deployments or state else [])
    if view.running:
        push_files(cluster, deployments)
    return view


def view(cluster: Cluster) -> GatewayView:
    return _view(cluster, None)


def usage(cluster: Cluster) -> UsageFile:
    """The gate's counts per key, as it last wrote them on the head (none: empty)."""
    client = cluster.client(cluster.head)
    path = gw.file_path(head_state_dir(cluster), cluster.config.name, "usage")
    found = client.script(gw.read_file_script(path))
    if not found.ok or not found.stdout.strip():
        return UsageFile()
    return parse_usage(found.stdout, f"{cluster.head.name}: the gateway's usage file")


def stop(cluster: Cluster) -> bool:
    """Stop the gate, then the router; True when either ran."""
    client, name = cluster.client(cluster.head), cluster.config.name
    ran = [
        client.script(scripts.kill_group(scripts.log_paths(gw.process_name(name, role))[1])
                      + 'rm -f "$pidfile"\nexit $ran\n', 60).ok
        for role in (gw.GATE, gw.ROUTER)
    ]  # fmt: skip
    return any(ran)


def _alive(cluster: Cluster, role: str) -> bool:
    name = gw.process_name(cluster.config.name, role)
    return process.alive(cluster.client(cluster.head), name)


def _view(cluster: Cluster, want: list[dict[str, str]] | None) -> GatewayView:
    config = cluster.config
    router, gate = _alive(cluster, gw.ROUTER), _alive(cluster, gw.GATE)
    out = GatewayView(url_of(config), router and gate, router, gate)
    if not router:
        return out
    head = config.head
    answer = cluster.client(head).script(
        gw.workers_script(head.python, config.gateway.router_port, want), 60
    )
    if not answer.ok:
        out.problem = answer.error_text()
        return out
    try:
        workers = loads(answer.stdout)
    except ParseError as err:
        out.problem = f"the router's worker list: {err}"
        return out
    out.workers = workers if isinstance(workers, list) else []
    return out


def _check_python(cluster: Cluster) -> None:
    python = python_of(cluster.config)
    found = cluster.client(cluster.head).script(
        f"{shlex.quote(python)} -c 'import vllm_router, aiohttp, halo_cluster.gateway.gate' 2>&1\n",
        60,
    )
    if not found.ok:
        raise LifecycleError(
            f"{cluster.head.name}: {python} cannot run the gateway (it needs halo with the "
            "gateway extra: pip install 'halo-cluster[gateway]'; or set [gateway] python): "
            f"{found.error_text()}"
        )


def _wait_ready(cluster: Cluster, ready: Ready, role: str, what: str) -> None:
    """Until the head reaches it; a process that exited meanwhile is its log's line."""
    client = cluster.client(cluster.head)
    name = gw.process_name(cluster.config.name, role)
    deadline = time.monotonic() + ready.timeout_s
    while True:
        if client.script(scripts.reach_script(ready.address, ready.port, 2), 30).ok:
            return
        gone = not process.alive(client, name)
        if gone or time.monotonic() > deadline:
            line = process.fatal_line(client, name) if gone else "it does not answer"
            stop(cluster)
            raise LifecycleError(f"{what} did not come up on {cluster.head.name}: {line}")
