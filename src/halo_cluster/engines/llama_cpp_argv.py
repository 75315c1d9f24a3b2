"""What ``halo serve --engine llama.cpp`` runs where (pure).

llama.cpp spreads a GGUF model's layers, not its tensors: ``ggml-rpc-server`` on every
worker exposes that node's CPU (or GPU) as a device, and ``llama-server`` on the head loads
the model with ``--rpc`` naming every worker. The head keeps the first layers on its own
backend; the rest are offloaded (``--n-gpu-layers``) and split evenly over the workers
(``--tensor-split``), so every node holds about an equal share.

``ggml-rpc-server`` has no authentication: it is bound to the worker's fabric address, never
0.0.0.0, and halo says so. Its transport follows each node's plan: llama.cpp's RDMA
transport where the plan is RDMA and the build has it, else TCP on the fabric
(``GGML_RPC_NO_RDMA=1`` keeps an RDMA-capable build on TCP).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from halo_cluster.config import NodeConfig, ServeConfig
from halo_cluster.config.section import Section
from halo_cluster.engines.owned import OwnedOptions
from halo_cluster.engines.scripts import tcp_probe
from halo_cluster.modelstore.rpc_cache import CACHE_DIR

RPC_SERVER = "ggml-rpc-server"
LLAMA_SERVER = "llama-server"
DEFAULT_RPC_PORT = 50052
NO_AUTH_NOTE = (
    "llama.cpp's rpc-server has no authentication: it listens only on each worker's fabric "
    "address; keep the fabric private"
)


OPTION_KEYS = ("build", "rpc_port", "threads", "args", "cache_gib")
DEFAULT_CACHE_GIB = 64.0  # each worker's RPC tensor cache, at most (0: none)
MAX_CACHE_GIB = 1 << 20
# llama-server's options that halo sets itself, each in every spelling its --help lists for
# it, and the halo option that sets each
_OWNED = {
    **dict.fromkeys(("--host",), "[serve] host or --host"),
    **dict.fromkeys(("--port",), "[serve] port or --port"),
    **dict.fromkeys(("-m", "--model"), "MODEL (halo serve MODEL)"),
    **dict.fromkeys(("--rpc",), "the workers: every [[node]] after the head"),
    **dict.fromkeys(
        ("-ngl", "--gpu-layers", "--n-gpu-layers", "-ts", "--tensor-split"),
        "halo splits the layers over the nodes",
    ),
    **dict.fromkeys(("--api-key", "--api-key-file"), "[serve] api_key_env (kept out of argv)"),
    **dict.fromkeys(("-np", "--parallel"), "[serve] max_num_seqs"),
    **dict.fromkeys(("-c", "--ctx-size"), "[serve] max_model_len"),
    **dict.fromkeys(("-t", "--threads"), "[serve.llama_cpp] threads"),
    **dict.fromkeys(("-lv", "--log-verbosity", "--verbosity"), "halo reads llama.cpp's lines"),
}


class LlamaOwned(OwnedOptions):
    """The options halo sets, looked up the way llama-server reads an argument: a key is
    any argument that sets one of them (iterating gives the spellings). llama.cpp's parser
    takes only whole spellings, no prefixes and no '--name=value', but turns every '_' of
    an argument that starts with '--' into '-' first: '--api_key' is --api-key. An
    argument with '=' is refused by its name all the same: llama-server would not start."""

    def option(self, arg: str) -> str | None:
        """The option of halo's that ``arg`` sets in llama-server, or None."""
        key = arg.split("=", 1)[0]
        if key.startswith("--"):
            key = key.replace("_", "-")
        return key if key in self._options else None


OWNED = LlamaOwned(_OWNED)


@dataclass(frozen=True)
class LlamaCppOptions:
    """``[serve.llama_cpp]``."""

    build: str = ""  # the llama.cpp build (its bin/ holds the programs); "": from PATH
    rpc_port: int = DEFAULT_RPC_PORT  # ggml-rpc-server's port on every worker
    threads: int | None = None  # llama.cpp's CPU threads per node (default: its own)
    args: tuple[str, ...] = ()  # more of llama-server's options, as given
    cache_gib: float = DEFAULT_CACHE_GIB  # each worker's RPC tensor cache at most (0: off)

    @classmethod
    def from_section(cls, section: Section | None) -> LlamaCppOptions:
        if section is None:
            return cls()
        section.only(OPTION_KEYS)
        return cls(
            build=section.text("build", ""),
            rpc_port=section.number("rpc_port", DEFAULT_RPC_PORT, maximum=65535)
            or DEFAULT_RPC_PORT,
            threads=section.number("threads", None),
            args=section.words("args"),
            cache_gib=section.amount("cache_gib", DEFAULT_CACHE_GIB, MAX_CACHE_GIB),
        )

    @property
    def cache_bytes(self) -> int:
        return int(self.cache_gib * (1 << 30))


def binary(options: LlamaCppOptions, name: str) -> str:
    """A llama.cpp program: from [serve.llama_cpp] build's bin/ when set, else from PATH."""
    return f"{options.build.rstrip('/')}/bin/{name}" if options.build else name


def offload_layers(layers: int, workers: int) -> int:
    """How many layers go to the workers (``--n-gpu-layers``): their share when the head
    holds one share too. llama.cpp counts the output layer as one more (a model of 4 blocks
    has 5) and offloads from the end, so the workers hold the last layers and the output."""
    if workers <= 0:
        return 0
    total = layers + 1
    return min(total, round(total * workers / (workers + 1)))


def rpc_transport(planned_rdma: bool, build_rdma: bool) -> str:
    """The RPC transport a worker uses: "rdma" only when both the plan and the build allow."""
    return "rdma" if planned_rdma and build_rdma else "tcp"


def rpc_env(transport: str, cache: str | None = None) -> dict[str, str]:
    """Environment that holds an RDMA-capable build on TCP when TCP was chosen, and puts
    rpc-server's tensor cache (``-c``) in ``cache``, a directory of the node's own (the
    default, ~/.cache/llama.cpp, may be shared between nodes or belong to someone else)."""
    env = {} if transport == "rdma" else {"GGML_RPC_NO_RDMA": "1"}
    if cache:
        env["LLAMA_CACHE"] = cache
    return env


def rpc_cache_dir(models_dir: str) -> str:
    """Where a worker's rpc-server keeps the tensors it received: beside the node's models
    (as a shell word: ``models_dir`` may start with ~, expanded on the node)."""
    return models_dir.rstrip("/") + "/" + CACHE_DIR


def rpc_server_argv(options: LlamaCppOptions, address: str, cache: bool = True) -> list[str]:
    """``ggml-rpc-server`` bound to ``address`` (a worker's fabric address); with ``cache``
    and a quota above 0 (``cache_gib``), its local tensor cache on (``-c``): a second load
    takes the big tensors from the worker's disk instead of the wire."""
    if address in ("0.0.0.0", "::", ""):
        raise ValueError("rpc-server must bind a fabric address, not every interface")
    argv = [binary(options, RPC_SERVER), "-H", address, "-p", str(options.rpc_port)]
    if cache and options.cache_gib > 0:
        argv.append("-c")
    if options.threads:
        argv += ["-t", str(options.threads)]
    return argv


def llama_server_argv(
    serve: ServeConfig, options: LlamaCppOptions, model: str, endpoints: list[str], layers: int
) -> list[str]:
    """``llama-server`` on the head: the model, every worker's endpoint, the offload."""
    argv = [binary(options, LLAMA_SERVER), "--model", model, "--host", serve.host]
    # verbosity 4: the lines that name each RPC device and the layers offloaded
    argv += ["--port", str(serve.port), "--no-ui", "--log-verbosity", "4"]
    if endpoints:
        argv += ["--rpc", ",".join(endpoints)]
        argv += ["--n-gpu-layers", str(offload_layers(layers, len(endpoints)))]
        argv += ["--tensor-split", ",".join("1" for _ in endpoints)]
    else:
        argv += ["--n-gpu-layers", "0"]
    slots = serve.max_num_seqs or 4  # llama-server's own default
    argv += ["--parallel", str(slots)]
    if serve.max_model_len:  # the context is shared by the slots: each gets max_model_len
        argv += ["--ctx-size", str(serve.max_model_len * slots)]
    if options.threads:
        argv += ["--threads", str(options.threads)]
    return [*argv, *serve.extra_args]


# exit codes of the preflight script, and what each means
PREFLIGHT = {
    10: "{program} is not installed there: build it ('make llama-cpp') or set "
    "[serve.llama_cpp] build",
    11: "the model {model} is not there: put the GGUF file at the same path on the head",
    12: "port {port} is already in use there: stop what listens on it, or pick another port",
    13: "{model} is not a GGUF file (its first bytes are not 'GGUF')",
    14: "{model} is a truncated GGUF file (shorter than its header)",
}
IDENTITY = re.compile(r"^build ([0-9a-f]{64})$", re.M)
RDMA_BUILD = re.compile(r"^rdma (yes|no)$", re.M)


def preflight_script(program: str, model: str | None, port: tuple[str, int] | None) -> str:
    """Exit 0 when the node can take its part, printing ``build <sha256>`` (its build
    identity: the source pin in the build's ``build.json``, else the rpc-server binary's
    hash; two builds of one pin on two machines differ in their bytes but speak the same
    RPC protocol) and ``rdma yes|no`` (whether the rpc-server beside ``program`` has
    llama.cpp's RDMA transport: it then calls libibverbs); else one of ``PREFLIGHT``'s
    codes."""
    exe = shlex.quote(program)
    lines = [
        f"p=$(command -v {exe} 2>/dev/null) || exit 10",
        f'r="$(dirname "$p")/{RPC_SERVER}"; j="$(dirname "$(dirname "$p")")/build.json"',
        # the identity: halo's build record (the source pin) when there, else the binary
        'if [ -f "$j" ]; then echo "build $(grep -m1 \'"source"\' "$j" | sha256sum | cut -c1-64)"; '
        'elif [ -x "$r" ]; then echo "build $(sha256sum < "$r" | cut -c1-64)"; fi',
        'v=no; if [ -x "$r" ] && grep -q ibv_create_qp "$r"; then v=yes; fi; echo "rdma $v"',
    ]
    if model is not None:
        # the path is a path wherever it goes, even one that starts with '-': an operand
        # after '--' or a redirection, never a word a program could read as its option
        quoted = shlex.quote(model)
        lines += [
            f"test -f {quoted} || exit 11",
            f'[ "$(head -c 4 < {quoted})" = GGUF ] || exit 13',
            f'[ "$(stat -c %s -- {quoted})" -ge 24 ] || exit 14',
        ]
    if port is not None:
        lines.append(f"if {tcp_probe(*port)}; then exit 12; fi")
    return "".join(line + "\n" for line in lines) + "exit 0\n"


def build_identity(preflight_stdout: str) -> str | None:
    """The rpc-server's sha256 a preflight printed (None when the node has none)."""
    found = IDENTITY.search(preflight_stdout)
    return found.group(1) if found else None


def build_has_rdma(preflight_stdout: str) -> bool:
    """Whether the node's build has llama.cpp's RDMA transport, as its preflight said."""
    found = RDMA_BUILD.search(preflight_stdout)
    return bool(found and found.group(1) == "yes")


@dataclass(frozen=True)
class Worker:
    """A node that runs ``ggml-rpc-server``: where it listens and over which transport."""

    node: NodeConfig
    address: str
    transport: str

    def endpoint(self, port: int) -> str:
        return f"{self.address}:{port}"
