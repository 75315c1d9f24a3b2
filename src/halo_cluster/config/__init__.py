"""``halo.toml`` -> one frozen, validated Config. The only module that reads the environment
for settings (``XDG_CONFIG_HOME``).

    [cluster]
    name = "strix"
    transport = "auto"            # auto / infiniband / roce / ethernet / thunderbolt
    ssh_config = "ssh_config"     # optional, relative to this file

    [ray]                         # optional
    port = 6379
    dashboard = false             # when true, bound to dashboard_host (127.0.0.1)

    [models]                      # optional: each node's model store (halo model)
    dir = "/var/lib/halo/models"  # on the node's own disk

    [gateway]                     # optional: one endpoint for every deployment
    host = "127.0.0.1"            # where clients reach it, on the head
    port = 8080
    aliases = { fast = "small" }  # a name clients may send -> a deployment

    [[node]]
    name = "strix1"
    ssh = "root@192.168.1.51"     # any target your ssh understands (ssh_config aliases too)
    fabric_address = "192.168.100.1"
    exec_prefix = "toolbox run -c vllm --"   # optional: string or list
    python = "python3"                       # optional: the Python (>= 3.9) halo's node code
                                             # runs with (sent over SSH, cached by hash)
    halo = "/opt/halo/.venv/bin/halo"        # optional: an installed halo to use instead
    gpus = 0                                 # optional: CPU-only node, GPU checks skipped
    mgmt_address = "192.168.1.51"            # optional: management address (probes)
    env = { HF_HOME = "/models" }            # optional: extra environment on this node
"""

from halo_cluster.config.load import load_config
from halo_cluster.config.model import (
    Config,
    GatewayConfig,
    NodeConfig,
    RayConfig,
    ServeConfig,
    default_engine,
    default_llama_cpp,
    find_config,
    halo_node_code,
    profiles_dir,
    results_dir,
    secret,
)
from halo_cluster.errors import ConfigError

__all__ = [
    "Config",
    "ConfigError",
    "GatewayConfig",
    "NodeConfig",
    "RayConfig",
    "ServeConfig",
    "default_engine",
    "default_llama_cpp",
    "find_config",
    "halo_node_code",
    "load_config",
    "profiles_dir",
    "results_dir",
    "secret",
]
