"""``halo.toml`` -> one frozen, validated Config. The only module that reads the environment
for settings (``XDG_CONFIG_HOME``).

    [cluster]
    name = "strix"
    transport = "auto"            # auto / infiniband / roce / ethernet / thunderbolt
    ssh_config = "ssh_config"     # optional, relative to this file

    [ray]                         # optional
    port = 6379
    dashboard = false             # when true, bound to dashboard_host (127.0.0.1)

    [[node]]
    name = "strix1"
    ssh = "root@192.168.1.51"     # any target your ssh understands (ssh_config aliases too)
    fabric_address = "192.168.100.1"
    exec_prefix = "toolbox run -c vllm --"   # optional: string or list
    halo = "/opt/halo/.venv/bin/halo"        # optional, default "halo"
    gpus = 0                                 # optional: CPU-only node, GPU checks skipped
    mgmt_address = "192.168.1.51"            # optional: management address (probes)
    env = { HF_HOME = "/models" }            # optional: extra environment on this node
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halo_cluster.errors import UsageError
from halo_cluster.transport import WANTED

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
CLUSTER_KEYS = {"name", "transport", "ssh_config"}
NODE_KEYS = {"name", "ssh", "fabric_address", "mgmt_address", "exec_prefix", "halo", "gpus", "env"}
RAY_KEYS = {"port", "dashboard", "dashboard_host", "command", "auth"}
SERVE_KEYS = {
    "model",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "max_model_len",
    "gpu_memory_utilization",
    "enforce_eager",
    "host",
    "port",
    "api_key_env",
    "command",
    "extra_args",
    "executor",
    "max_num_seqs",
    "engine",
    "llama_cpp",
    "rpc_port",
    "threads",
}
EXECUTORS = ("ray", "mp")
ENGINES = ("vllm", "llama.cpp")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ConfigError(UsageError):
    """A bad halo.toml: names the file, the field and (when it can) the line."""


@dataclass(frozen=True)
class NodeConfig:
    name: str
    ssh: str
    fabric_address: str | None
    exec_prefix: tuple[str, ...] = ()
    halo: str = "halo"
    gpus: int | None = None  # None: as many as the node has; 0: CPU-only
    mgmt_address: str | None = None  # the management (SSH) network address, for probes
    env: tuple[tuple[str, str], ...] = ()  # extra environment for this node's processes

    @property
    def host(self) -> str:
        """The host part of the ssh target (``user@host`` -> ``host``)."""
        return self.ssh.rsplit("@", 1)[-1]

    def tool(self, name: str) -> str:
        """A command installed next to this node's halo (same environment), else on PATH."""
        if "/" in self.halo:
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
    model: str | None = None
    tensor_parallel_size: int | None = None  # default: one rank per node
    pipeline_parallel_size: int = 1
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None  # default 0.90 on unified-memory APUs
    enforce_eager: bool | None = None  # default true on APUs (graph capture can deadlock)
    host: str = "127.0.0.1"
    port: int = 8000
    api_key_env: str | None = None  # the NAME of the environment variable holding the key
    command: str = "vllm"
    extra_args: tuple[str, ...] = ()
    # "ray": one vLLM driver on the head, ranks as Ray actors; "mp": vLLM's own multi-node
    # executor, one process per node (--nnodes/--node-rank, --headless on the others)
    executor: str = "ray"
    max_num_seqs: int | None = None
    # "vllm" (tensor parallel over Ray or vLLM's mp executor) or "llama.cpp" (layers split
    # over ggml-rpc-server workers, llama-server on the head)
    engine: str = "vllm"
    llama_cpp: str = ""  # the llama.cpp build (its bin/ holds the programs); "": from PATH
    rpc_port: int = 50052  # ggml-rpc-server's port on every worker
    threads: int | None = None  # llama.cpp's CPU threads per node (default: its own)


@dataclass(frozen=True)
class Config:
    path: Path
    name: str
    transport: str
    nodes: tuple[NodeConfig, ...]
    ssh_config: Path | None = None
    ray: RayConfig = RayConfig()
    serve: ServeConfig = ServeConfig()

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


def default_engine() -> str | None:
    """The engine environment to use when none is named: $HALO_ENGINE, else the
    ``.venv-engine`` beside halo's own environment (a checkout's, built by 'make engine')."""
    import sys

    named = os.environ.get("HALO_ENGINE")
    if named:
        return named
    candidate = Path(sys.prefix).parent / ".venv-engine"
    return str(candidate) if (candidate / "bin" / "python").is_file() else None


def default_llama_cpp() -> str | None:
    """The llama.cpp build to use when none is named: $HALO_LLAMA_CPP, else the
    ``.llama-cpp`` beside halo's own environment (a checkout's, built by 'make llama-cpp')."""
    import sys

    named = os.environ.get("HALO_LLAMA_CPP")
    if named:
        return named
    candidate = Path(sys.prefix).parent / ".llama-cpp"
    return str(candidate) if (candidate / "bin" / "llama-server").is_file() else None


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


MAX_CONFIG_BYTES = 1 << 20


def load_config(path: Path) -> Config:
    text = _read_config(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML: nested too deeply") from None
    return _validate(path, text, data)


def _read_config(path: Path) -> str:
    """The file's text: a regular file, at most 1 MiB, UTF-8 (a BOM is accepted)."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path}: not a regular file")
        raw = handle.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than 1 MiB; not a halo.toml")
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None


def _validate(path: Path, text: str, data: dict[str, Any]) -> Config:
    where = _Locator(path, text)
    for key in data:
        if key not in ("cluster", "node", "ray", "serve"):
            raise where.error(
                key, f"unknown section [{key}] (known: [cluster], [ray], [serve], [[node]])"
            )
    cluster = data.get("cluster", {})
    if not isinstance(cluster, dict):
        raise where.error("cluster", "[cluster] must be a table")
    _unknown(where, cluster, CLUSTER_KEYS, "cluster")
    transport = _string(where, cluster, "transport", "cluster", default="auto")
    if transport not in WANTED:
        raise where.error(
            "transport", f"cluster.transport must be one of {', '.join(WANTED)}, not {transport!r}"
        )
    raw_nodes = data.get("node", [])
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise ConfigError(f"{path}: no [[node]] entries: declare at least one node")
    nodes = tuple(_node(where, raw, index) for index, raw in enumerate(raw_nodes))
    names = [n.name for n in nodes]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise where.error("name", f"node name {duplicate!r} appears twice")
    ssh_config = _string(where, cluster, "ssh_config", "cluster", default="")
    name = _string(where, cluster, "name", "cluster", default=path.parent.resolve().name)
    if not _CLUSTER_NAME.match(name):
        raise where.error(
            "name",
            f"cluster name {name!r}: use 1-64 letters, digits, '.', '_' or '-' "
            "(set [cluster] name when the directory's name is not one)",
        )
    return Config(
        path=path,
        name=name,
        transport=transport,
        nodes=nodes,
        ssh_config=(path.parent / ssh_config) if ssh_config else None,
        ray=_ray(where, data.get("ray", {})),
        serve=_serve(where, data.get("serve", {})),
    )


def _ray(where: _Locator, raw: Any) -> RayConfig:
    if not isinstance(raw, dict):
        raise where.error("ray", "[ray] must be a table")
    _unknown(where, raw, RAY_KEYS, "ray")
    port = raw.get("port", 6379)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise where.error("port", "ray.port must be a port number (1-65535)")
    dashboard = raw.get("dashboard", False)
    if not isinstance(dashboard, bool):
        raise where.error("dashboard", "ray.dashboard must be true or false")
    command = _string(where, raw, "command", "ray", default="") or None
    auth = _string(where, raw, "auth", "ray", default="token")
    if auth not in ("token", "none"):
        raise where.error("auth", 'ray.auth must be "token" or "none"')
    host = _string(where, raw, "dashboard_host", "ray", default="127.0.0.1")
    return RayConfig(port, dashboard, host, command, auth)


def _node(where: _Locator, raw: Any, index: int) -> NodeConfig:
    label = f"node[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where.path}: {label} must be a table")
    _unknown(where, raw, NODE_KEYS, label, index)
    name = _string(where, raw, "name", label, index=index)
    if not _NAME.match(name):
        raise where.error(
            "name", f"{label}.name {name!r}: use letters, digits, '.', '_' or '-'", index
        )
    fabric = _address(where, raw, "fabric_address", label, index)
    mgmt = _address(where, raw, "mgmt_address", label, index)
    prefix = raw.get("exec_prefix", [])
    if isinstance(prefix, str):
        try:
            prefix = shlex.split(prefix)
        except ValueError as err:
            raise where.error("exec_prefix", f"{label}.exec_prefix: {err}", index) from None
    if not isinstance(prefix, list) or not all(isinstance(p, str) for p in prefix):
        raise where.error(
            "exec_prefix", f"{label}.exec_prefix must be a string or a list of strings", index
        )
    gpus = raw.get("gpus")
    if gpus is not None and (not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0):
        raise where.error("gpus", f"{label}.gpus must be a whole number >= 0", index)
    ssh = _string(where, raw, "ssh", label, index=index, default=name)
    if not ssh or ssh.startswith("-") or any(c.isspace() or ord(c) < 32 for c in ssh):
        raise where.error(
            "ssh", f"{label}.ssh {ssh!r}: an SSH target (host, user@host or an alias)", index
        )
    return NodeConfig(
        name=name,
        ssh=ssh,
        fabric_address=fabric,
        exec_prefix=tuple(prefix),
        halo=_string(where, raw, "halo", label, index=index, default="halo"),
        gpus=gpus,
        mgmt_address=mgmt,
        env=_env(where, raw.get("env", {}), label, index),
    )


def _serve(where: _Locator, raw: Any) -> ServeConfig:
    if not isinstance(raw, dict):
        raise where.error("serve", "[serve] must be a table")
    _unknown(where, raw, SERVE_KEYS, "serve")
    ints = {}
    for key in (
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "max_model_len",
        "port",
        "max_num_seqs",
        "rpc_port",
        "threads",
    ):
        value = raw.get(key)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise where.error(key, f"serve.{key} must be a whole number >= 1")
        ints[key] = value
    utilization = raw.get("gpu_memory_utilization")
    if utilization is not None and (
        not isinstance(utilization, int | float) or not 0 < utilization <= 1
    ):
        raise where.error(
            "gpu_memory_utilization", "serve.gpu_memory_utilization must be in (0, 1]"
        )
    eager = raw.get("enforce_eager")
    if eager is not None and not isinstance(eager, bool):
        raise where.error("enforce_eager", "serve.enforce_eager must be true or false")
    extra = raw.get("extra_args", [])
    if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
        raise where.error("extra_args", "serve.extra_args must be a list of strings")
    key_env = _string(where, raw, "api_key_env", "serve", default="") or None
    if key_env is not None and not _ENV_NAME.match(key_env):
        raise where.error(
            "api_key_env", "serve.api_key_env names an environment variable, e.g. HALO_API_KEY"
        )
    executor = _string(where, raw, "executor", "serve", default="ray")
    if executor not in EXECUTORS:
        raise where.error("executor", 'serve.executor must be "ray" or "mp"')
    engine = _string(where, raw, "engine", "serve", default="vllm")
    if engine not in ENGINES:
        raise where.error("engine", 'serve.engine must be "vllm" or "llama.cpp"')
    for key in ("port", "rpc_port"):
        number = ints[key]
        if number is not None and number > 65535:
            raise where.error(key, f"serve.{key} must be a port number (1-65535)")
    return ServeConfig(
        model=_string(where, raw, "model", "serve", default="") or None,
        tensor_parallel_size=ints["tensor_parallel_size"],
        pipeline_parallel_size=ints["pipeline_parallel_size"] or 1,
        max_model_len=ints["max_model_len"],
        gpu_memory_utilization=float(utilization) if utilization is not None else None,
        enforce_eager=eager,
        host=_string(where, raw, "host", "serve", default="127.0.0.1"),
        port=ints["port"] or 8000,
        api_key_env=key_env,
        command=_string(where, raw, "command", "serve", default="vllm"),
        extra_args=tuple(extra),
        executor=executor,
        max_num_seqs=ints["max_num_seqs"],
        engine=engine,
        llama_cpp=_string(where, raw, "llama_cpp", "serve", default=""),
        rpc_port=ints["rpc_port"] or 50052,
        threads=ints["threads"],
    )


def secret(name: str | None) -> str | None:
    """A secret from this process's environment (API key, HF token): never logged or stored."""
    return os.environ.get(name) if name else None


def _env(where: _Locator, raw: Any, label: str, index: int) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, dict):
        raise where.error("env", f'{label}.env must be a table of NAME = "value"', index)
    for name, value in raw.items():
        if not _ENV_NAME.match(name) or not isinstance(value, str):
            raise where.error(
                "env", f"{label}.env.{name}: names are NAME_LIKE_THIS, values strings", index
            )
    return tuple(sorted(raw.items()))


def _address(where: _Locator, raw: dict[str, Any], key: str, label: str, index: int) -> str | None:
    value = _string(where, raw, key, label, index=index, default="") or None
    if value is not None:
        try:
            ipaddress.IPv4Address(value)
        except ValueError:
            raise where.error(
                key, f"{label}.{key} {value!r} is not an IPv4 address", index
            ) from None
    return value


def _unknown(
    where: _Locator, table: dict[str, Any], known: set[str], label: str, index: int | None = None
) -> None:
    for key in table:
        if key not in known:
            raise where.error(
                key, f"unknown field {label}.{key} (known: {', '.join(sorted(known))})", index
            )


def _string(
    where: _Locator,
    table: dict[str, Any],
    key: str,
    label: str,
    *,
    index: int | None = None,
    default: str | None = None,
) -> str:
    value = table.get(key, default)
    if value is None:
        raise ConfigError(f"{where.path}: {label}.{key} is required")
    if not isinstance(value, str):
        raise where.error(key, f"{label}.{key} must be a string", index)
    return value


class _Locator:
    """Finds the line of a key (tomllib reports no positions for valid documents)."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def error(self, key: str, message: str, node_index: int | None = None) -> ConfigError:
        line = self._line(key, node_index)
        at = f":{line}" if line else ""
        return ConfigError(f"{self.path}{at}: {message}")

    def _line(self, key: str, node_index: int | None) -> int | None:
        seen = -1
        pattern = re.compile(rf"^\s*(\[+\s*)?{re.escape(key)}\b")
        for number, line in enumerate(self.lines, start=1):
            if re.match(r"^\s*\[\[\s*node\s*\]\]", line):
                seen += 1
            if (node_index is None or seen == node_index) and pattern.match(line):
                return number
        return None


def results_dir() -> Path:
    """Where benchmark results are kept: $XDG_DATA_HOME/halo/results (~/.local/share/...)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "halo" / "results"
