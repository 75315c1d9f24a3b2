"""The wire between the controller and halo's node side, defined once and used by both:
every node command's name and arguments (``commands``), the controller's argv for each
(``args``: ``counters_args(…)`` -> ``["counters", "--fabric", …]``) and what each prints
(``answers``: typed answers, ``parse_*`` on the controller, ``to_dict()`` on the node; a
malformed answer is one ``WireError``, one line). ``node/main.py`` builds its argparse parsers
from ``COMMANDS``, so a name or a flag exists in one place.

The bytes are those halo has always sent and printed: a node with an installed halo of this
version and the zipapp both keep working. Pure and standard library only, Python 3.9: the
node side imports it too. Secrets and large inputs travel in the environment, never in argv:
``SERVE_KEY_ENV`` (serve-health, serve-probe) and ``BENCH_SPEC_ENV`` (bench-driver).
"""

from halo_cluster.errors import WireError
from halo_cluster.wire.answers import (
    Counters,
    NodeInfo,
    Ping,
    RayNode,
    ServeHealth,
    ServeProbe,
    ServeTokens,
    Setup,
    SetupStep,
    Stream,
    TokenAnswer,
    TokenStep,
    parse_counters,
    parse_gguf_layers,
    parse_inventory,
    parse_node_info,
    parse_ping,
    parse_ray_nodes,
    parse_serve_health,
    parse_serve_probe,
    parse_serve_tokens,
    parse_setup,
    parse_stream,
)
from halo_cluster.wire.args import (
    bench_driver_args,
    counters_args,
    exporter_args,
    gguf_layers_args,
    inventory_args,
    net_probe_ping_args,
    net_probe_serve_args,
    net_probe_stream_args,
    node_info_args,
    ray_nodes_args,
    serve_health_args,
    serve_probe_args,
    serve_tokens_args,
    setup_args,
    supervise_args,
)
from halo_cluster.wire.commands import (
    BENCH_SPEC_ENV,
    COMMANDS,
    NAMES,
    SERVE_KEY_ENV,
    Arg,
    Command,
    read_value,
)

__all__ = [
    "BENCH_SPEC_ENV",
    "COMMANDS",
    "NAMES",
    "SERVE_KEY_ENV",
    "Arg",
    "Command",
    "Counters",
    "NodeInfo",
    "Ping",
    "RayNode",
    "ServeHealth",
    "ServeProbe",
    "ServeTokens",
    "Setup",
    "SetupStep",
    "Stream",
    "TokenAnswer",
    "TokenStep",
    "WireError",
    "bench_driver_args",
    "counters_args",
    "exporter_args",
    "gguf_layers_args",
    "inventory_args",
    "net_probe_ping_args",
    "net_probe_serve_args",
    "net_probe_stream_args",
    "node_info_args",
    "parse_counters",
    "parse_gguf_layers",
    "parse_inventory",
    "parse_node_info",
    "parse_ping",
    "parse_ray_nodes",
    "parse_serve_health",
    "parse_serve_probe",
    "parse_serve_tokens",
    "parse_setup",
    "parse_stream",
    "ray_nodes_args",
    "read_value",
    "serve_health_args",
    "serve_probe_args",
    "serve_tokens_args",
    "setup_args",
    "supervise_args",
]
