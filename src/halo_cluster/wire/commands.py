"""The node commands, defined once: each one's name and arguments, in the order the controller
writes them, and how a value is written in argv and read back on the node. ``node/main.py``
builds its argparse parsers from ``COMMANDS``; the controller's builders (``wire/args.py``)
write argv with ``Command.argv``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SERVE_KEY_ENV = "HALO_SERVE_KEY"  # serve-health/-probe/-tokens: the API key, never in argv
BENCH_SPEC_ENV = "HALO_BENCH_SPEC"  # bench-driver: the run's spec (JSON)
MODEL_SPEC_ENV = "HALO_MODEL_SPEC"  # model-pipe: the hop's spec (JSON, with its secrets)

# -- the commands and their arguments ------------------------------------------------------
# An argument's kind: how its value is written in argv and read back on the node.
STR, INT, FLOAT, FLAG = "str", "int", "float", "flag"
CSV = "csv"  # a list, comma-separated in one value: A,B
RDMA = "rdma"  # DEVICE:PORT, the port a number (a device name has no colon)
TARGET = "target"  # ADDRESS:PORT
PEER = "peer"  # NAME,fabric|mgmt,ADDRESS


@dataclass(frozen=True)
class Arg:
    """One argument: ``--name`` (an option) or ``name`` (a positional)."""

    name: str
    kind: str = STR
    default: Any = None
    required: bool = False
    many: bool = False  # may be given again: every value kept, in order
    joined: bool = False  # written as --name=VALUE (setup's --step)
    choices: tuple[str, ...] = ()
    low: int | None = None  # INT: the range allowed
    high: int | None = None
    help: str | None = None

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")

    @property
    def positional(self) -> bool:
        return not self.name.startswith("-")


@dataclass(frozen=True)
class Command:
    """A node command: its arguments, in the order the controller writes them, or its modes
    (``net-probe serve|ping|stream``), each a command of its own."""

    name: str
    args: tuple[Arg, ...] = ()
    modes: tuple[Command, ...] = ()

    def mode(self, name: str) -> Command:
        return next(m for m in self.modes if m.name == name)

    def argv(self, **values: Any) -> list[str]:
        """``[name, …]`` with each value given (None: left out) written as the node reads it."""
        unknown = set(values) - {a.dest for a in self.args}
        if unknown:
            raise TypeError(f"{self.name}: no argument {', '.join(sorted(unknown))}")
        out = [self.name]
        for arg in self.args:
            out += _written(self.name, arg, values.get(arg.dest))
        return out


ROOT = Arg("--root", default="/", help="the filesystem root to read (tests: a fixture root)")
_JSON = Arg("--json", FLAG, help="(always JSON)")
_SERVE = (Arg("--host", default="127.0.0.1"), Arg("--port", INT, required=True))
_SECONDS = Arg("--seconds", FLOAT, 5.0)
MAX_COUNT = 1 << 20  # --size, --streams

INVENTORY = Command("inventory", (ROOT, _JSON, Arg("--versions", FLAG)))
# the node's power sources read once (facts/power.py; amd-smi's too where it is installed)
POWER = Command("power", (ROOT,))
COUNTERS = Command(
    "counters",
    # --link: a routed fabric's cables by name (their bytes add up to the fabric path)
    (ROOT, Arg("--fabric"), Arg("--mgmt"), Arg("--rdma", RDMA), Arg("--link", many=True)),
)
SERVE_HEALTH = Command("serve-health", _SERVE)
SERVE_PROBE = Command("serve-probe", (*_SERVE, Arg("--tokens", INT, 64, low=1, high=4096)))
# greedy answers to fixed prompts, with each token's log-probability (the token witness)
SERVE_TOKENS = Command(
    "serve-tokens",
    (
        *_SERVE,
        Arg("--tokens", INT, 16, low=1, high=256),
        Arg("--top", INT, 5, low=1, high=20),
        Arg("--prompt", many=True, joined=True),
    ),
)
GGUF_LAYERS = Command("gguf-layers", (Arg("path"),))
RAY_NODES = Command("ray-nodes", (Arg("--wait", CSV), Arg("--timeout", FLOAT, 60.0)))
_PROBE_SERVE = (
    Arg("--bind", required=True),
    Arg("--port", INT, required=True, low=1, high=65535),
    Arg("--limit", FLOAT, 120.0),
)
_TARGET = Arg("target", TARGET)
_SIZE = Arg("--size", INT, 64, low=1, high=MAX_COUNT)
_STREAMS = Arg("--streams", INT, 4, low=1, high=MAX_COUNT)
NET_PROBE = Command(
    "net-probe",
    modes=(
        Command("serve", _PROBE_SERVE),
        Command("ping", (_TARGET, _SECONDS, _SIZE)),
        Command("stream", (_TARGET, _SECONDS, _STREAMS)),
    ),
)
BENCH_DRIVER = Command("bench-driver")  # the spec in $HALO_BENCH_SPEC
SETUP = Command(
    "setup",
    (
        ROOT,
        Arg("--local", FLAG, help="(always this node)"),
        _JSON,
        Arg("--distro", default="auto", choices=("auto", "fedora", "ubuntu", "debian")),
        Arg("--mtu", INT, 9000, low=1280, high=65520),
        Arg("--step", many=True, joined=True),
        Arg("--fabric-iface"),
        Arg("--address"),
        # this node's part of a routed fabric, as JSON (mesh.NodeFabric.to_dict)
        Arg("--fabric"),
        # NAME=ADDRESS: a node's name in halo.toml and its fabric address, for /etc/hosts
        Arg("--name", many=True),
        Arg("--apply", FLAG),
        Arg("--yes", FLAG),
    ),
)
EXPORTER = Command(
    "exporter",
    (
        ROOT,
        Arg("--listen", default="127.0.0.1:9877"),
        Arg("--interval", default="1s"),
        Arg("--peer", PEER, many=True),
        Arg("--echo", many=True),
        Arg("--probe", many=True),
        Arg("--probe-port", INT, 9878, low=1, high=65535),
        Arg("--rescan", default="10s"),
        Arg("--rdma-probe-every"),
        Arg("--once", FLAG),
    ),
)
NODE_INFO = Command("node-info")
_STORE = Arg("--store", required=True, help="the node's model store ([models] dir)")
_MODEL = Arg("name", help="the model's name in the store")
MODEL_LIST = Command("model-list", (_STORE,))
MODEL_STATE = Command("model-state", (_STORE, _MODEL))
MODEL_VERIFY = Command("model-verify", (_STORE, _MODEL))
MODEL_RM = Command("model-rm", (_STORE, _MODEL))
MODEL_HASH = Command(
    "model-hash",
    (
        _STORE,
        Arg("--name"),
        Arg(
            "--prefix", many=True, help="REL:SIZE: also the sha256 of that file's first SIZE bytes"
        ),
        Arg("path", help="the model on this node: a directory or a GGUF file"),
    ),
)
MODEL_PIPE = Command("model-pipe")  # the spec in $HALO_MODEL_SPEC
# llama.cpp's RPC tensor cache in the store: trimmed to --quota-bytes (the oldest used first)
RPC_CACHE = Command(
    "rpc-cache",
    (_STORE, Arg("--quota-bytes", INT, low=0, help="trim to this size (default: only look)")),
)
MODEL_STOP = Command("model-stop", (Arg("--run", required=True),))
# the supervisor on the head: its spec (with the API key) is a 0600 file, never argv
SUPERVISE = Command("supervise", (Arg("--spec", required=True, help="the spec file (JSON)"),))

COMMANDS = (
    INVENTORY,
    COUNTERS,
    POWER,
    SERVE_HEALTH,
    SERVE_PROBE,
    SERVE_TOKENS,
    GGUF_LAYERS,
    RAY_NODES,
    NET_PROBE,
    BENCH_DRIVER,
    SETUP,
    EXPORTER,
    NODE_INFO,
    MODEL_LIST,
    MODEL_STATE,
    MODEL_VERIFY,
    MODEL_RM,
    MODEL_HASH,
    MODEL_PIPE,
    MODEL_STOP,
    RPC_CACHE,
    SUPERVISE,
)
NAMES = tuple(c.name for c in COMMANDS)
METAVARS = {RDMA: "DEVICE:PORT", TARGET: "ADDRESS:PORT", PEER: "NAME,PATH,ADDR", CSV: "A,B,..."}


# -- values: written by the controller, read by the node -------------------------------------
def read_value(arg: Arg, text: str) -> Any:
    """``text`` from argv as the node reads it; ValueError (one line) when it is not one."""
    if arg.kind == INT:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None
        if arg.low is not None and value < arg.low and arg.high is None:
            raise ValueError(f"{value} is below {arg.low}")
        if (arg.low is not None and value < arg.low) or (arg.high is not None and value > arg.high):
            raise ValueError(f"{value} is not in {arg.low}..{arg.high}")
        return value
    if arg.kind == FLOAT:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number") from None
    readers = {CSV: read_csv, RDMA: read_rdma, TARGET: read_target, PEER: read_peer}
    return readers[arg.kind](text) if arg.kind in readers else text


def read_csv(text: str) -> tuple[str, ...]:
    return tuple(item for item in text.split(",") if item)


def _host_port(text: str) -> tuple[str, int] | None:
    host, colon, port = text.rpartition(":")
    if not colon or not host or not (port.isascii() and port.isdigit()):
        return None
    return host, int(port)


def read_rdma(text: str) -> tuple[str, int]:
    """``DEVICE:PORT`` (split at the last colon) as (device, port): the port 1 to 255 (a u8
    in the verbs API); anything else is refused, never read as a guessed port."""
    found = _host_port(text)
    if found is None or len(text.rpartition(":")[2]) > 3 or not 1 <= found[1] <= 255:
        raise ValueError(f"{text!r}: use DEVICE:PORT (PORT from 1 to 255)")
    return found


def read_target(text: str) -> tuple[str, int]:
    """``ADDRESS:PORT`` (IPv6 with or without brackets) as (address, port)."""
    found = _host_port(text)
    if found is None:
        raise ValueError(f"{text!r}: use ADDRESS:PORT")
    host = found[0]
    if host.startswith("[") and host.endswith("]"):  # an IPv6 address in brackets
        host = host[1:-1]
    return host, found[1]


def read_peer(text: str) -> tuple[str, str, str]:
    """``NAME,fabric|mgmt,ADDRESS`` as (name, path, address)."""
    parts = text.split(",")
    if len(parts) != 3 or parts[1] not in ("fabric", "mgmt") or not all(parts):
        raise ValueError(f"{text!r}: use NAME,fabric|mgmt,ADDRESS")
    return parts[0], parts[1], parts[2]


def _written(command: str, arg: Arg, value: Any) -> list[str]:
    if value is None or value is False:
        return []
    if arg.kind == FLAG:
        return [arg.name]
    out: list[str] = []
    for item in value if arg.many else [value]:
        text = _text(arg.kind, item)
        if arg.joined:
            out.append(f"{arg.name}={text}")
            continue
        if text.startswith("-"):  # argparse would take it for an option
            raise ValueError(f"{command} {arg.name}: {text!r} would read as an option")
        out += [text] if arg.positional else [arg.name, text]
    return out


def _text(kind: str, value: Any) -> str:
    if kind == FLOAT:
        return f"{value:g}"  # six significant digits: seconds and limits need no more
    if kind in (RDMA, TARGET):
        return f"{value[0]}:{value[1]}"
    if kind in (CSV, PEER):
        return ",".join(value)
    return str(value)
