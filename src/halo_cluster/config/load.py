"""Reading and validating halo.toml: every error one line naming the file, the field and
(when it can) the line."""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from halo_cluster import engine_registry
from halo_cluster.bounded.infile import read_text
from halo_cluster.config.model import (
    _CLUSTER_NAME,
    _ENV_NAME,
    _NAME,
    CLUSTER_KEYS,
    DEFAULT_HARDWARE,
    DEFAULT_MODELS_DIR,
    FABRIC_KEYS,
    MOVED_SERVE_KEYS,
    NODE_KEYS,
    RAY_KEYS,
    SERVE_KEYS,
    Config,
    FabricConfig,
    GatewayConfig,
    ModelsConfig,
    NodeConfig,
    RayConfig,
    ServeConfig,
    fabric_of,
)
from halo_cluster.config.section import COMMAND_KEY, Section
from halo_cluster.errors import ConfigError, FabricError
from halo_cluster.mesh import (
    DEFAULT_IDENTITY_IFACE,
    DEFAULT_LINK_NETWORK,
    MAX_NODES,
    ROUTINGS,
)
from halo_cluster.netnames import bind_host_problem, ifname_problem, node_address_problem
from halo_cluster.printable import quoted
from halo_cluster.supervision import SuperviseSettings
from halo_cluster.transport import WANTED

_ALIAS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")  # a model name a client may send
MAX_CONFIG_BYTES = 1 << 20
MAX_GPUS = 1024  # per node: far above any machine's, low enough to count without surprise


def load_config(path: Path) -> Config:
    import tomllib  # here, not at the top: the node side (Python >= 3.9) imports config

    text = _read_config(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    except ValueError:  # Python's limit on digits: an integer of more than 4300 of them
        raise ConfigError(f"{path}: not valid TOML: a number of more than 4300 digits") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML: nested too deeply") from None
    return _validate(path, text, data)


def _read_config(path: Path) -> str:
    """The file's text: a regular file, at most 1 MiB, UTF-8 (a BOM is accepted)."""
    return read_text(path, MAX_CONFIG_BYTES, "a halo.toml", ConfigError)


def _validate(path: Path, text: str, data: dict[str, Any]) -> Config:
    where = _Locator(path, text)
    _no_nul(where, data)
    for key in data:
        if key not in ("cluster", "node", "ray", "serve", "models", "fabric", "gateway"):
            raise where.error(
                key,
                f"unknown section [{key}] (known: [cluster], [ray], [serve], [models], "
                "[fabric], [gateway], [[node]])",
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
    if len(raw_nodes) > MAX_NODES:
        raise ConfigError(
            f"{path}: {len(raw_nodes)} [[node]] entries: a cluster has at most {MAX_NODES}; "
            "split it into several halo.toml"
        )
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
    hardware = _string(where, cluster, "hardware", "cluster", default=DEFAULT_HARDWARE)
    link = _string(where, cluster, "link", "cluster", default="") or None
    fabric = _fabric(where, data.get("fabric", {}))
    _check_mesh(where, nodes, fabric)
    return Config(
        path=path,
        name=name,
        transport=transport,
        hardware=hardware,
        link=link,
        nodes=nodes,
        ssh_config=(path.parent / ssh_config) if ssh_config else None,
        ray=_ray(where, data.get("ray", {})),
        serve=_serve(where, data.get("serve", {})),
        models=_models(where, data.get("models", {})),
        fabric=fabric,
        gateway=_gateway(where, data.get("gateway", {})),
    )


def _gateway(where: _Locator, raw: Any) -> GatewayConfig:
    if not isinstance(raw, dict):
        raise where.error("gateway", "[gateway] must be a table")
    _unknown(
        where,
        raw,
        {"host", "port", "router_port", "metrics_port", "metrics_host", "python", "aliases"},
        "gateway",
    )
    ports = {}
    for key, default in (("port", 8080), ("router_port", 30080), ("metrics_port", 29080)):
        value = raw.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
            raise where.error(key, f"gateway.{key} must be a port number (1-65535)")
        ports[key] = value
    if len(set(ports.values())) < len(ports):
        raise where.error("port", "gateway.port, router_port and metrics_port must differ")
    aliases = raw.get("aliases", {})
    if not isinstance(aliases, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and _ALIAS.match(k) and _ALIAS.match(v)
        for k, v in aliases.items()
    ):
        raise where.error(
            "aliases", 'gateway.aliases is a table of alias = "deployment", each a plain name'
        )
    return GatewayConfig(
        host=_bind_host(where, raw, "host", "gateway"),
        metrics_host=_bind_host(where, raw, "metrics_host", "gateway"),
        python=_string(where, raw, "python", "gateway", default=""),
        aliases=tuple(sorted(aliases.items())),
        **ports,
    )


def _fabric(where: _Locator, raw: Any) -> FabricConfig:
    if not isinstance(raw, dict):
        raise where.error("fabric", "[fabric] must be a table")
    _unknown(where, raw, FABRIC_KEYS, "fabric")
    network = _string(where, raw, "link_network", "fabric", default=DEFAULT_LINK_NETWORK)
    try:
        pool = ipaddress.IPv4Network(network)
    except ValueError:
        pool = None
    if pool is None or pool.prefixlen > 31:
        raise where.error(
            "link_network", f"fabric.link_network {network!r}: a network such as 10.254.0.0/24"
        )
    mtu = raw.get("mtu", 9000)
    if not isinstance(mtu, int) or isinstance(mtu, bool) or not 1280 <= mtu <= 65520:
        raise where.error("mtu", "fabric.mtu must be a whole number from 1280 to 65520")
    iface = _string(where, raw, "identity_iface", "fabric", default=DEFAULT_IDENTITY_IFACE)
    if ifname_problem(iface):
        raise where.error(
            "identity_iface", f"fabric.identity_iface {iface!r} {ifname_problem(iface)}"
        )
    routing = _string(where, raw, "routing", "fabric", default="static")
    if routing not in ROUTINGS:
        raise where.error(
            "routing", f"fabric.routing must be one of {', '.join(ROUTINGS)}, not {routing!r}"
        )
    return FabricConfig(str(pool), mtu, iface, routing)


def _links(where: _Locator, raw: Any, label: str, index: int) -> tuple[tuple[str, str], ...]:
    """``links = { thunderbolt0 = "node2", thunderbolt1 = "node3" }``: interface -> node."""
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise where.error(
            "links",
            f'{label}.links must be a table of interface = "node", e.g. '
            '{ thunderbolt0 = "node2" }',
            index,
        )
    for ifname in raw:
        if ifname_problem(ifname):
            raise where.error(
                "links", f"{label}.links: interface {ifname!r} {ifname_problem(ifname)}", index
            )
    return tuple(raw.items())


def _check_mesh(where: _Locator, nodes: tuple[NodeConfig, ...], fabric: FabricConfig) -> None:
    """Cabled nodes: every node has links and an identity (fabric_address), and the cables
    make one fabric (both ends name each cable, every node reaches every other)."""
    if not any(n.links for n in nodes):
        return
    for index, node in enumerate(nodes):
        if len(nodes) > 1 and not node.links:
            raise where.error(
                "links", f"{node.name} has no links while other nodes are cabled", index
            )
        if not node.fabric_address:
            raise where.error(
                "links",
                f"{node.name}: a cabled node needs fabric_address (its identity address, "
                "which halo setup puts on fabric.identity_iface)",
                index,
            )
    try:
        fabric_of(nodes, fabric)
    except FabricError as err:
        raise where.error("links", f"the nodes' links: {err}") from None


def _models(where: _Locator, raw: Any) -> ModelsConfig:
    if not isinstance(raw, dict):
        raise where.error("models", "[models] must be a table")
    _unknown(where, raw, {"dir"}, "models")
    folder = _string(where, raw, "dir", "models", default=DEFAULT_MODELS_DIR)
    if not folder.startswith(("/", "~")) or "\x00" in folder or len(folder) > 1024:
        raise where.error("dir", f"models.dir {folder[:80]!r} must be an absolute path (or ~/...)")
    return ModelsConfig(folder.rstrip("/") or "/")


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
    host = _bind_host(where, raw, "dashboard_host", "ray")
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
    if gpus is not None and (
        not isinstance(gpus, int) or isinstance(gpus, bool) or not 0 <= gpus <= MAX_GPUS
    ):
        raise where.error(
            "gpus", f"{label}.gpus must be a whole number from 0 to {MAX_GPUS}", index
        )
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
        halo=_optional_string(where, raw, "halo", label, index),
        python=_string(where, raw, "python", label, index=index, default="python3") or "python3",
        gpus=gpus,
        mgmt_address=mgmt,
        env=_env(where, raw.get("env", {}), label, index),
        links=_links(where, raw.get("links", {}), label, index),
    )


def _serve(where: _Locator, raw: Any) -> ServeConfig:
    if not isinstance(raw, dict):
        raise where.error("serve", "[serve] must be a table")
    supervise = _supervise(where, raw.get(SUPERVISE_TABLE, {}))
    raw = {k: v for k, v in raw.items() if k != SUPERVISE_TABLE}
    sections = _engine_sections(where, raw)
    _moved(where, raw)
    _unknown(where, {k: v for k, v in raw.items() if k not in sections}, SERVE_KEYS, "serve")
    ints = {}
    for key in ("max_model_len", "port", "max_num_seqs"):
        value = raw.get(key)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise where.error(key, f"serve.{key} must be a whole number >= 1")
        ints[key] = value
    if ints["port"] is not None and ints["port"] > 65535:
        raise where.error("port", "serve.port must be a port number (1-65535)")
    extra = raw.get("extra_args", [])
    if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
        raise where.error("extra_args", "serve.extra_args must be a list of strings")
    key_env = _string(where, raw, "api_key_env", "serve", default="") or None
    if key_env is not None and not _ENV_NAME.match(key_env):
        raise where.error(
            "api_key_env", "serve.api_key_env names an environment variable, e.g. HALO_API_KEY"
        )
    host = _bind_host(where, raw, "host", "serve")
    stall = raw.get("stall_s", 600.0)
    if isinstance(stall, bool) or not isinstance(stall, (int, float)) or not 30 <= stall <= 86400:
        raise where.error(
            "stall_s", "serve.stall_s must be seconds between 30 and 86400 (default 600)"
        )
    engine = _string(where, raw, "engine", "serve", default=engine_registry.DEFAULT)
    if engine not in engine_registry.names():
        known = " or ".join(f'"{n}"' for n in engine_registry.names())
        raise where.error("engine", f"serve.engine must be {known}")
    return ServeConfig(
        model=_string(where, raw, "model", "serve", default="") or None,
        host=host,
        port=ints["port"] or 8000,
        api_key_env=key_env,
        engine=engine,
        max_model_len=ints["max_model_len"],
        max_num_seqs=ints["max_num_seqs"],
        extra_args=tuple(extra),
        stall_s=float(stall),
        sections=sections,
        supervise=supervise,
    )


SUPERVISE_TABLE = "supervise"
# [serve.supervise]: each key's type and the least value it takes
_SUPERVISE_LIMITS: dict[str, tuple[type, float]] = {
    "interval_s": (float, 0.5),
    "deadline_s": (float, 1.0),
    "wedge_probes": (int, 1),
    "backoff_s": (float, 0.0),
    "backoff_max_s": (float, 0.0),
    "crash_restarts": (int, 1),
    "crash_window_s": (float, 1.0),
    "start_timeout_s": (float, 5.0),
    "canary_s": (float, 0.0),
    "memory_min_available_pct": (float, 0.0),
    "memory_max_pressure_pct": (float, 0.0),
}
_SUPERVISE_MAX = 86400.0 * 7  # a week: any setting above is a typo


def _supervise(where: _Locator, raw: Any) -> SuperviseSettings:
    """``[serve.supervise]``: every value a number in its range (``enabled`` a boolean)."""
    label = f"serve.{SUPERVISE_TABLE}"
    if not isinstance(raw, dict):
        raise where.error(SUPERVISE_TABLE, f"[{label}] must be a table")
    _unknown(where, raw, {*_SUPERVISE_LIMITS, "enabled"}, label)
    values: dict[str, Any] = {}
    if "enabled" in raw:
        if not isinstance(raw["enabled"], bool):
            raise where.error("enabled", f"{label}.enabled must be true or false")
        values["enabled"] = raw["enabled"]
    for key, (kind, low) in _SUPERVISE_LIMITS.items():
        if key not in raw:
            continue
        value = raw[key]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or (kind is int and not isinstance(value, int)):
            what = "a whole number" if kind is int else "a number"
            raise where.error(key, f"{label}.{key} must be {what}")
        if not low <= value <= _SUPERVISE_MAX or value != value:
            raise where.error(key, f"{label}.{key} must be between {low:g} and {_SUPERVISE_MAX:g}")
        values[key] = kind(value)
    if "memory_max_pressure_pct" in values and values["memory_max_pressure_pct"] > 100:
        raise where.error("memory_max_pressure_pct", f"{label}.memory_max_pressure_pct is a %")
    return SuperviseSettings(**values)


def _engine_sections(where: _Locator, raw: dict[str, Any]) -> dict[str, Section]:
    """The engines' own tables under [serve] (``[serve.vllm]``, ``[serve.llama_cpp]``),
    kept as written: each engine reads its own keys."""
    sections = {}
    for key, value in raw.items():
        if not isinstance(value, dict):
            continue
        if engine_registry.by_section(key) is None:
            known = ", ".join(
                f"[serve.{engine_registry.section_name(n)}]" for n in engine_registry.names()
            )
            raise where.error(key, f"unknown table [serve.{key}] (engines: {known})")
        section = Section(where.path, key, value, tuple(where.lines))
        if COMMAND_KEY in value:  # a command line: split as the shell does, here, not at serve
            section.command(COMMAND_KEY, "")
        sections[key] = section
    return sections


def _moved(where: _Locator, raw: dict[str, Any]) -> None:
    """A key that moved to an engine's table: one line saying where it lives now."""
    for key, (table, new) in MOVED_SERVE_KEYS.items():
        if key in raw and not isinstance(raw[key], dict):
            line = Section(where.path, "", lines=tuple(where.lines)).line_in("serve", key)
            at = f":{line}" if line else ""
            raise ConfigError(
                f"{where.path}{at}: serve.{key} moved: write it as '{new} = ...' under "
                f"[serve.{table}] (each engine's options have their own table)"
            )


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
    problem = None if value is None else node_address_problem(value)
    if problem is not None:
        raise where.error(key, f"{label}.{key} {quoted(value)} {problem}", index)
    return value


def _bind_host(where: _Locator, raw: dict[str, Any], key: str, label: str) -> str:
    """An address or host name a server binds to (``[serve] host``, ``[ray] dashboard_host``)."""
    host = _string(where, raw, key, label, default="127.0.0.1")
    problem = bind_host_problem(host)
    if host.startswith("-") or problem is not None:
        why = "" if host.startswith("-") or problem is None else f" {problem}"
        raise where.error(
            key, f"{label}.{key} {quoted(host)}{why}: give an address to bind, e.g. 127.0.0.1"
        )
    return host


def _no_nul(where: _Locator, data: dict[str, Any]) -> None:
    """A NUL in any string of the file (a value or a key) is one line naming it: no command,
    path, argument or environment variable can carry one."""
    for table, key, label, text in _strings(data):
        if "\x00" in text:
            raise where.in_table(table, key, f"{label} holds a NUL character (\\x00)")


def _strings(
    value: Any, table: str = "", key: str = "", label: str = ""
) -> Iterator[tuple[str, str, str, str]]:
    """(table, key, label, text) of every string in ``value``: keys and values, in lists
    too. ``table`` is where ``key`` is written (``node[1]``, ``serve.vllm``)."""
    if isinstance(value, str):
        yield table, key, label, value
    elif isinstance(value, list):
        for number, item in enumerate(value):
            inner = f"{label}[{number}]"
            yield from _strings(item, inner if isinstance(item, dict) else table, key, inner)
    elif isinstance(value, dict):
        for name, item in value.items():
            inner = f"{label}.{name}" if label else name
            yield table, name, inner, name
            yield from _strings(item, inner if isinstance(item, dict) else table, name, inner)


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


def _optional_string(
    where: _Locator, table: dict[str, Any], key: str, label: str, index: int
) -> str | None:
    """A string that may be left out (or empty: the same as left out)."""
    value = table.get(key)
    if value is not None and not isinstance(value, str):
        raise where.error(key, f"{label}.{key} must be a string", index)
    return value or None


class _Locator:
    """Finds the line of a key (tomllib reports no positions for valid documents)."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def error(self, key: str, message: str, node_index: int | None = None) -> ConfigError:
        line = self._line(key, node_index)
        at = f":{line}" if line else ""
        return ConfigError(f"{self.path}{at}: {message}")

    def in_table(self, table: str, key: str, message: str) -> ConfigError:
        """The error of ``key`` written in ``table`` (``node[1]``, ``node[1].env``,
        ``serve.vllm``, ""): the key's line, else its table's within a node."""
        node = re.match(r"node\[(\d+)\]\.?([^.]*)", table)
        if node:
            index, inner = int(node.group(1)), node.group(2)
            line = self._line(key, index) or (self._line(inner, index) if inner else None)
        else:
            sections = Section(self.path, "", lines=tuple(self.lines))
            line = (sections.line_in(table, key) if table else None) or self._line(key, None)
        return ConfigError(f"{self.path}{f':{line}' if line else ''}: {message}")

    def _line(self, key: str, node_index: int | None) -> int | None:
        seen = -1
        pattern = re.compile(rf"^\s*(\[+\s*)?{re.escape(key)}\b")
        for number, line in enumerate(self.lines, start=1):
            if re.match(r"^\s*\[\[\s*node\s*\]\]", line):
                seen += 1
            if (node_index is None or seen == node_index) and pattern.match(line):
                return number
        return None
