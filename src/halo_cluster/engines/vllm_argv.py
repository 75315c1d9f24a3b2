"""What vLLM runs where (pure): its options (``[serve.vllm]``), the ranks' placement over the
nodes, ``vllm serve``'s argv for each executor, and the preflight script. Scripts go to
``bash -s``; every value in them is quoted."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from halo_cluster.config import NodeConfig, ServeConfig
from halo_cluster.config.section import Section
from halo_cluster.engines.owned import OwnedOptions
from halo_cluster.engines.scripts import tcp_probe
from halo_cluster.errors import UsageError

EXECUTORS = ("ray", "mp")
OPTION_KEYS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "gpu_memory_utilization",
    "enforce_eager",
    "command",
    "executor",
    "args",
)
# vllm serve's options that halo sets itself, each in every spelling vLLM 0.32.0's parser
# lists for it ('-n' is --nnodes, --device-memory-utilization is --gpu-memory-utilization),
# and the halo option that sets each. --config is here too: its YAML file sets any option,
# halo's among them, where halo cannot see it.
_OWNED = {
    **dict.fromkeys(("--host",), "[serve] host or --host"),
    **dict.fromkeys(("--port",), "[serve] port or --port"),
    **dict.fromkeys(("--model",), "MODEL (halo serve MODEL)"),
    **dict.fromkeys(("-tp", "--tensor-parallel-size"), "--tp or [serve.vllm] tensor_parallel_size"),
    **dict.fromkeys(("-pp", "--pipeline-parallel-size"), "[serve.vllm] pipeline_parallel_size"),
    **dict.fromkeys(("--distributed-executor-backend",), "--executor or [serve.vllm] executor"),
    **dict.fromkeys(
        ("-n", "--nnodes", "-r", "--node-rank", "--master-addr", "--master-port", "--headless"),
        "halo places the ranks (--executor mp)",
    ),
    **dict.fromkeys(("--api-key",), "[serve] api_key_env (kept out of argv)"),
    **dict.fromkeys(
        ("--gpu-memory-utilization", "--device-memory-utilization"),
        "[serve.vllm] gpu_memory_utilization",
    ),
    **dict.fromkeys(("--enforce-eager", "--no-enforce-eager"), "[serve.vllm] enforce_eager"),
    **dict.fromkeys(("--max-model-len",), "[serve] max_model_len"),
    **dict.fromkeys(("--max-num-seqs",), "[serve] max_num_seqs"),
    **dict.fromkeys(("--config",), "options in [serve.vllm] args, where halo sees them"),
}


class VllmOwned(OwnedOptions):
    """The options halo sets, looked up the way ``vllm serve`` reads an argument: a key is
    any argument that sets one of them, not only its spelling (iterating gives the
    spellings). vLLM's FlexibleArgumentParser turns '_' into '-' in a long option's name
    (up to its first '.'), reads '--name.key value' as '--name {"key": value}' and
    '--name=value' as '--name value'; argparse (allow_abbrev) then takes a prefix of a
    long option or of a single-dash one ('--hos' is --host, '-t' is -tp), and a one-letter
    option with its value attached ('-n2'). A prefix vLLM finds ambiguous fails there
    anyway: refusing it here costs nothing."""

    def option(self, arg: str) -> str | None:
        """The option of halo's that ``arg`` sets in vLLM (its spelling here), or None."""
        if not arg.startswith("-") or arg in ("-", "--"):
            return None
        key = arg.split("=", 1)[0]
        if key.startswith("--"):
            key = "--" + key[2:].split(".", 1)[0].replace("_", "-")
        else:
            key = key.split(".", 1)[0]
        if key in self._options:
            return key
        if len(key) < 2 or key == "--":
            return None
        long = key.startswith("--")
        found = sorted(o for o in self._options if o.startswith(key) and o.startswith("--") == long)
        if not long and key[:2] in self._options:  # '-n2': the value attached
            found.append(key[:2])
        return found[0] if found else None


OWNED = VllmOwned(_OWNED)


@dataclass(frozen=True)
class VllmOptions:
    """``[serve.vllm]``, with ``--tp``/``--executor`` applied."""

    tensor_parallel_size: int | None = None  # default: one rank per node
    pipeline_parallel_size: int = 1
    gpu_memory_utilization: float | None = None  # default 0.90 on unified-memory APUs
    enforce_eager: bool | None = None  # default true on APUs (graph capture can deadlock)
    command: str = "vllm"
    # "ray": one vLLM driver on the head, ranks as Ray actors; "mp": vLLM's own multi-node
    # executor, one process per node (--nnodes/--node-rank, --headless on the others)
    executor: str = "ray"
    args: tuple[str, ...] = ()  # more of vllm serve's options, as given

    @classmethod
    def from_section(cls, section: Section | None) -> VllmOptions:
        if section is None:
            return cls()
        section.only(OPTION_KEYS)
        return cls(
            tensor_parallel_size=section.number("tensor_parallel_size", None),
            pipeline_parallel_size=section.number("pipeline_parallel_size", 1) or 1,
            gpu_memory_utilization=section.fraction("gpu_memory_utilization"),
            enforce_eager=section.flag("enforce_eager"),
            command=section.command("command", "vllm"),
            executor=section.choice("executor", EXECUTORS, "ray"),
            args=section.words("args"),
        )


@dataclass(frozen=True)
class Placement:
    """A node that takes ranks: its ``--node-rank`` (mp) and how many ranks it holds."""

    node: NodeConfig
    node_rank: int
    ranks: int


def placement(
    nodes: Sequence[NodeConfig], capacity: Mapping[str, int], world: int, option: str
) -> list[Placement]:
    """Fill the nodes in config order (the head first), each up to its capacity (GPUs, or
    one engine rank on a CPU-only node). ``option`` names the flag in the error."""
    offered = sum(capacity.get(n.name, 0) for n in nodes)
    if world > offered:
        shown = ", ".join(f"{n.name} {capacity.get(n.name, 0)}" for n in nodes)
        raise UsageError(
            f"{option}: the cluster offers {offered} engine rank(s) ({shown}); "
            "lower it or add nodes"
        )
    placed: list[Placement] = []
    left = world
    for node in nodes:
        if left == 0:
            break
        take = min(left, capacity.get(node.name, 0))
        if take:
            placed.append(Placement(node, len(placed), take))
            left -= take
    return placed


def serve_argv(
    serve: ServeConfig,
    options: VllmOptions,
    model: str,
    tp: int,
    unified_memory: bool,
    mp: tuple[int, int, str, int] | None = None,
) -> list[str]:
    """``vllm serve``. ``mp``: (node rank, nodes, master address, master port) for vLLM's
    own multi-node executor; node ranks above 0 run headless (no API server)."""
    argv = [
        *shlex.split(options.command),
        "serve",
        model,
        "--tensor-parallel-size",
        str(tp),
        "--pipeline-parallel-size",
        str(options.pipeline_parallel_size),
        "--distributed-executor-backend",
        "mp" if mp else "ray",
    ]
    if mp is not None:
        node_rank, nnodes, master, port = mp
        argv += ["--nnodes", str(nnodes), "--node-rank", str(node_rank)]
        argv += ["--master-addr", master, "--master-port", str(port)]
        if node_rank > 0:
            argv.append("--headless")
    if mp is None or mp[0] == 0:
        argv += ["--host", serve.host, "--port", str(serve.port)]
    utilization = options.gpu_memory_utilization or (0.90 if unified_memory else None)
    if utilization is not None:
        argv += ["--gpu-memory-utilization", f"{utilization:g}"]
    eager = options.enforce_eager
    if eager if eager is not None else unified_memory:
        argv.append("--enforce-eager")
    if serve.max_model_len:
        argv += ["--max-model-len", str(serve.max_model_len)]
    if serve.max_num_seqs:
        argv += ["--max-num-seqs", str(serve.max_num_seqs)]
    return [*argv, *serve.extra_args]


# exit codes of the preflight script, and what each means
PREFLIGHT = {
    10: "the engine command {command} is not installed there: build the engine environment "
    "('make engine') or set [serve.vllm] command",
    11: "the model {model} is not there (no config.json): put it at the same path on every "
    "node, or serve a shared path",
    12: "port {port} is already in use there: stop what listens on it, or pick --port",
}


def is_local_model(model: str) -> bool:
    """A directory (absolute or relative) rather than a hub id like ``org/name``."""
    return model.startswith(("/", "./", "../", "~"))


def preflight_script(command: str, model: str | None, port: tuple[str, int] | None) -> str:
    """Exit 0 when the node can take its part; else one of ``PREFLIGHT``'s codes."""
    exe = shlex.split(command)[0] if command.strip() else "vllm"
    lines = [f"command -v {shlex.quote(exe)} >/dev/null 2>&1 || exit 10"]
    if model is not None:
        lines.append(f"test -f {shlex.quote(model)}/config.json || exit 11")
    if port is not None:
        lines.append(f"if {tcp_probe(*port)}; then exit 12; fi")
    return "".join(line + "\n" for line in lines) + "exit 0\n"
