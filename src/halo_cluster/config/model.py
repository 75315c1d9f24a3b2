"""The cluster config as objects: nodes, Ray, serve, and where things live by default.
Parsing and validation of halo.toml are in ``config.load``."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from halo_cluster import engine_registry
from halo_cluster.config.section import Section
from halo_cluster.errors import UsageError
from halo_cluster.mesh import DEFAULT_IDENTITY_IFACE, DEFAULT_LINK_NETWORK, Fabric, build_fabric
from halo_cluster.netnames import NODE_NAME
from halo_cluster.supervision import SuperviseSettings

if TYPE_CHECKING:
    from halo_cluster.nodecode import NodeCode

_NAME = re.compile(rf"^{NODE_NAME.pattern}$")
_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
CLUSTER_KEYS = {"name", "transport", "ssh_config", "hardware", "link"}
DEFAULT_HARDWARE = "strix-halo-128"  # the planner's profile of a node ('halo plan --list')
NODE_KEYS = {
    "name",
    "ssh",
    "fabric_address",
    "mgmt_address",
    "exec_prefix",
    "halo",
    "python",
    "gpus",
    "env",
    "links",
}
# [fabric]: the routed fabric of nodes cabled point to point (halo_cluster.mesh)
FABRIC_KEYS = {"link_network", "mtu", "identity_iface", "routing"}
RAY_KEYS = {"port", "dashboard", "dashboard_host", "command", "auth"}
# what every engine shares; each engine's own keys live in its [serve.<engine>] table
SERVE_KEYS = {
    "model",
    "host",
    "port",
    "api_key_env",
    "engine",
    "max_model_len",
    "max_num_seqs",
    "extra_args",
    "stall_s",
}
# keys that [serve] held before engines had their own tables: where each lives now
MOVED_SERVE_KEYS = {
    "tensor_parallel_size": ("vllm", "tensor_parallel_size"),
    "pipeline_parallel_size": ("vllm", "pipeline_parallel_size"),
    "gpu_memory_utilization": ("vllm", "gpu_memory_utilization"),
    "enforce_eager": ("vllm", "enforce_eager"),
    "command": ("vllm", "command"),
    "executor": ("vllm", "executor"),
    "llama_cpp": ("llama_cpp", "build"),
    "rpc_port": ("llama_cpp", "rpc_port"),
    "threads": ("llama_cpp", "threads"),
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class NodeConfig:
    name: str
    ssh: str
    fabric_address: str | None
    exec_prefix: tuple[str, ...] = ()
    # an installed halo to run node-side commands with; None (the default): halo sends its
    # node code to ``python`` on the node (halo_cluster.nodecode)
    halo: str | None = None
    gpus: int | None = None  # None: as many as the node has; 0: CPU-only
    mgmt_address: str | None = None  # the management (SSH) network address, for probes
    env: tuple[tuple[str, str], ...] = ()  # extra environment for this node's processes
    python: str = "python3"  # the node's Python (>= 3.9) for halo's node code
    # the node's cables of a switchless fabric: (its interface, the node at the other end);
    # empty on a switch. With links, ``fabric_address`` is the node's identity address.
    links: tuple[tuple[str, str], ...] = ()

    @property
    def runs(self) -> str:
        """How node-side commands run here, for people: the halo path or the Python."""
        return self.halo or f"{self.python} (halo's node code)"

    @property
    def host(self) -> str:
        """The host part of the ssh target (``user@host`` -> ``host``)."""
        return self.ssh.rsplit("@", 1)[-1]

    @property
    def address(self) -> str:
        """Where the node is reached for cluster traffic: its fabric address, else its host."""
        return self.fabric_address or self.host

    def gpus_used(self, found: int) -> int:
        """The GPUs an engine uses here: as configured, else as many as the node has
        (``found``); 0 on a CPU-only node."""
        return self.gpus if self.gpus is not None else found

    def tool(self, name: str) -> str:
        """A command installed next to this node's halo (same environment), else on PATH."""
        if self.halo and "/" in self.halo:
            return self.halo.rsplit("/", 1)[0] + "/" + name
        return name


@dataclass(frozen=True)
class RayConfig:
    port: int = 6379
    dashboard: bool = False
    dashboard_host: str = "127.0.0.1"
    command: str | None = None  # default: ``ray`` next to each node's halo
    auth: str = "token"  # Ray's token authentication; "none" leaves the cluster open


@dataclass(frozen=True)
class ServeConfig:
    """``[serve]``: what every engine shares. An engine's own options are in its table
    (``sections["vllm"]``, ``sections["llama_cpp"]``), read by the engine itself."""

    model: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    api_key_env: str | None = None  # the NAME of the environment variable holding the key
    engine: str = engine_registry.DEFAULT  # a name of engine_registry
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    extra_args: tuple[str, ...] = ()  # appended to the engine's own command line
    # a start with no new log line and nothing read on any node for this long has stalled
    stall_s: float = 600.0
    sections: Mapping[str, Section] = field(default_factory=dict)
    supervise: SuperviseSettings = field(default_factory=SuperviseSettings)  # [serve.supervise]

    def section(self, name: str) -> Section | None:
        return self.sections.get(name)


DEFAULT_MODELS_DIR = "/var/lib/halo/models"


@dataclass(frozen=True)
class ModelsConfig:
    """``[models]``: where each node keeps its models (``halo model``), on its own disk."""

    dir: str = DEFAULT_MODELS_DIR


@dataclass(frozen=True)
class GatewayConfig:
    """``[gateway]``: the one endpoint on the head in front of every deployment
    (``halo gateway``): where clients reach it, the router's own ports on the head's
    loopback, the Python that runs both (empty: the one running halo), and the names a
    deployment is also known by (``aliases = {"fast" = "small"}``: alias -> deployment)."""

    host: str = "127.0.0.1"
    port: int = 8080
    router_port: int = 30080
    metrics_port: int = 29080
    metrics_host: str = "127.0.0.1"  # where the router's metrics listen (Prometheus scrapes)
    python: str = ""
    aliases: tuple[tuple[str, str], ...] = ()

    def aliases_of(self, deployment: str) -> tuple[str, ...]:
        return tuple(alias for alias, name in self.aliases if name == deployment)


@dataclass(frozen=True)
class FabricConfig:
    """``[fabric]``: how halo addresses and routes a fabric of point-to-point cables (the
    nodes' ``links``): the /31s' network, the MTU of every cable, the interface that holds
    each node's identity address, and static routes or FRR's openfabric."""

    link_network: str = DEFAULT_LINK_NETWORK
    mtu: int = 9000
    identity_iface: str = DEFAULT_IDENTITY_IFACE
    routing: str = "static"


def fabric_of(nodes: tuple[NodeConfig, ...], fabric: FabricConfig) -> Fabric:
    """The routed fabric of ``nodes``' links under ``[fabric]`` (FabricError when their
    cabling cannot be one)."""
    return build_fabric(
        {n.name: n.fabric_address or "" for n in nodes},
        {n.name: n.links for n in nodes},
        fabric.link_network,
        fabric.mtu,
        fabric.identity_iface,
        fabric.routing,
    )


@dataclass(frozen=True)
class Config:
    path: Path
    name: str
    transport: str
    nodes: tuple[NodeConfig, ...]
    ssh_config: Path | None = None
    ray: RayConfig = RayConfig()
    serve: ServeConfig = ServeConfig()
    models: ModelsConfig = ModelsConfig()
    # the planner's view of the nodes and their fabric ('halo run', 'halo tune'): a hardware
    # profile id ('lab': measured by 'halo lab profile'), a link (None: the latest 'halo
    # bench collective' result, else the transport's preset)
    hardware: str = DEFAULT_HARDWARE
    link: str | None = None
    fabric: FabricConfig = FabricConfig()
    gateway: GatewayConfig = GatewayConfig()

    @property
    def routed(self) -> bool:
        """The nodes are cabled point to point (``links``), not on one switch."""
        return any(node.links for node in self.nodes)

    def mesh(self) -> Fabric | None:
        """The routed fabric the nodes' links make (None on a switch); the config's loader
        has already refused cabling that cannot be one."""
        if not self.routed:
            return None
        return fabric_of(self.nodes, self.fabric)

    @property
    def head(self) -> NodeConfig:
        """The first node runs the Ray head (and the vLLM driver)."""
        return self.nodes[0]

    def node(self, name: str) -> NodeConfig:
        for node in self.nodes:
            if node.name == name:
                return node
        known = ", ".join(n.name for n in self.nodes)
        raise UsageError(f"no node named {name!r} in {self.path} (nodes: {known})")


def _built_beside_halo(variable: str, folder: str, marker: str) -> str | None:
    """$``variable`` when set, else ``folder`` beside halo's own environment (a checkout's,
    built by make) when it holds ``marker``; None when neither."""
    import sys

    named = os.environ.get(variable)
    if named:
        return named
    candidate = Path(sys.prefix).parent / folder
    return str(candidate) if (candidate / marker).is_file() else None


def default_engine() -> str | None:
    """The engine environment to use when none is named: $HALO_ENGINE, else the
    ``.venv-engine`` beside halo's own environment (built by 'make engine')."""
    return _built_beside_halo("HALO_ENGINE", ".venv-engine", "bin/python")


def default_llama_cpp() -> str | None:
    """The llama.cpp build to use when none is named: $HALO_LLAMA_CPP, else the
    ``.llama-cpp`` beside halo's own environment (built by 'make llama-cpp')."""
    return _built_beside_halo("HALO_LLAMA_CPP", ".llama-cpp", "bin/llama-server")


def find_config(explicit: str | None) -> Path | None:
    """--config FILE, else ./halo.toml, else $XDG_CONFIG_HOME/halo/halo.toml; None if none."""
    if explicit:
        path = Path(explicit)
        if not path.exists():
            raise UsageError(f"config file {explicit} does not exist")
        if not path.is_file():
            raise UsageError(f"config file {explicit} is not a regular file")
        return path
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    for candidate in (Path("halo.toml"), Path(xdg) / "halo" / "halo.toml"):
        if candidate.is_file():
            return candidate
    return None


def secret(name: str | None) -> str | None:
    """A secret from this process's environment (API key, HF token): never logged or stored."""
    return os.environ.get(name) if name else None


def results_dir() -> Path:
    """Where benchmark results are kept: $XDG_DATA_HOME/halo/results (~/.local/share/...)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "halo" / "results"


def state_dir() -> Path:
    """halo's state on this machine (what 'halo serve' started, the supervisor's state):
    $XDG_STATE_HOME/halo (~/.local/state/...), as the node scripts name it."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "halo"


def profiles_dir() -> Path:
    """Hardware profiles halo measured on this machine ('halo lab profile'):
    $XDG_DATA_HOME/halo/hardware (~/.local/share/...)."""
    return results_dir().parent / "hardware"


def cache_dir() -> Path:
    """This user's cache for halo (the built node code): $XDG_CACHE_HOME/halo (~/.cache/...)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "halo"


def halo_node_code() -> NodeCode:
    """This halo's node code, its build kept in ``cache_dir()`` (the one way to get it)."""
    from halo_cluster.nodecode import node_code

    return node_code(cache_dir())
