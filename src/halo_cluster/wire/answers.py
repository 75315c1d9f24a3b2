"""What the node commands print, defined once: a frozen dataclass per answer whose
``to_dict()`` is the JSON the node prints, and a ``parse_*`` function per command that reads it
back on the controller. A malformed answer raises one ``WireError`` (a ValueError) whose
message is one line: the command, where in the answer, what was wrong and what came.

``inventory`` prints ``facts/model.py``'s Inventory (``parse_inventory`` reads it back);
``bench-driver`` prints JSON lines (``bench/events.py``); ``exporter --once`` prints
Prometheus text (``monitor/exposition.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from halo_cluster.bounded.jsonin import loads
from halo_cluster.errors import WireError
from halo_cluster.facts.model import (
    COUNTER,
    GAUGE,
    Inventory,
    PathCounters,
    PowerReading,
    inventory_from_dict,
)
from halo_cluster.jsonout import JsonObject
from halo_cluster.modelstore.gguf_header import MAX_BLOCKS


def _shown(value: Any) -> str:
    return ascii(value)[:60]  # escaped: whatever came, the message stays one line


def _fail(command: str, where: str, what: str, value: Any) -> WireError:
    place = f" {where}" if where else ""
    return WireError(f"{command}:{place} {what} (got {_shown(value)})")


def _load(command: str, text: str) -> Any:
    try:
        return loads(text)
    except ValueError:
        raise _fail(command, "", "not JSON", text) from None


def _object(command: str, value: Any, where: str = "") -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _fail(command, where, "is not an object" if where else "not an object", value)
    return value


def _list(command: str, value: Any, where: str = "") -> list[Any]:
    if not isinstance(value, list):
        raise _fail(command, where, "is not a list" if where else "not a list", value)
    return value


def _get(command: str, data: Mapping[str, Any], key: str, kind: str, where: str = "") -> Any:
    """``data[key]`` of ``kind``: str, int, number, bool, list, object; or ``kind?`` (or null)."""
    named = key if key.isidentifier() and key.isascii() else f"[{key!a}]"
    place = f"{where}.{named}" if where and not named.startswith("[") else f"{where}{named}"
    if key not in data:
        raise WireError(f"{command}: no {place} (got keys {_shown(sorted(data))})")
    value = data[key]
    if kind.endswith("?") and value is None:
        return None
    if not _is(kind.rstrip("?"), value):
        what = _NAMES[kind.rstrip("?")] + (" or null" if kind.endswith("?") else "")
        raise _fail(command, place, f"is not {what}", value)
    return _float(command, place, value) if kind == "number" else value  # 1 is a number too


def _float(command: str, place: str, value: Any) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer of hundreds of digits
        raise _fail(command, place, "is out of range", value) from None


_NAMES = {
    "str": "a string",
    "int": "an integer",
    "number": "a number",
    "bool": "true or false",
    "list": "a list",
    "object": "an object",
}


def _is(kind: str, value: Any) -> bool:
    if kind in ("int", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[kind])


_TYPES: dict[str, type | tuple[type, ...]] = {
    "str": str,
    "int": int,
    "number": (int, float),
    "bool": bool,
    "list": list,
    "object": dict,
}


def _strings(command: str, values: list[Any], where: str) -> tuple[str, ...]:
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise _fail(command, f"{where}[{index}]", "is not a string", value)
    return tuple(values)


# -- counters ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Counters:
    """``counters``: path ("fabric", "mgmt", "rdma") -> its counters; paths not found are left
    out and named in ``warnings``."""

    paths: Mapping[str, PathCounters]
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> JsonObject:
        paths: JsonObject = {name: c.to_dict() for name, c in self.paths.items()}
        return {"paths": paths, "warnings": list(self.warnings)}


def parse_counters(text: str) -> Counters:
    data = _object("counters", _load("counters", text))
    paths = {}
    for name, value in _get("counters", data, "paths", "object").items():
        where = f"paths[{name!a}]"
        path = _object("counters", value, where)
        paths[name] = PathCounters(
            _get("counters", path, "name", "str", where),
            _get("counters", path, "rx_bytes", "int?", where),
            _get("counters", path, "tx_bytes", "int?", where),
        )
    warnings = _strings("counters", _get("counters", data, "warnings", "list"), "warnings")
    return Counters(paths, warnings)


# -- power -------------------------------------------------------------------------------------
MAX_READINGS = 256  # a node's power sources: a few (two GPUs, two packages, psys)
MAX_NAME = 200  # a source's, tool's or domain's name


@dataclass(frozen=True)
class Power:
    """``power``: the node's power sources, each read once (``facts/power.py``: watts of a
    gauge, joules of a counter), and what could not be read."""

    readings: tuple[PowerReading, ...]
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> JsonObject:
        return {"readings": [r.to_dict() for r in self.readings], "warnings": list(self.warnings)}


def parse_power(text: str) -> Power:
    data = _object("power", _load("power", text))
    readings = _get("power", data, "readings", "list")
    if len(readings) > MAX_READINGS:
        raise _fail("power", "readings", f"has more than {MAX_READINGS}", len(readings))
    found = tuple(_reading(value, f"readings[{i}]") for i, value in enumerate(readings))
    warnings = _strings("power", _get("power", data, "warnings", "list"), "warnings")
    return Power(found, warnings)


def _reading(value: Any, where: str) -> PowerReading:
    data = _object("power", value, where)
    names = []
    for key in ("source", "tool", "domain"):
        name = _get("power", data, key, "str", where)
        if len(name) > MAX_NAME:
            raise _fail("power", f"{where}.{key}", "is too long for a name", name)
        names.append(name)
    kind = _get("power", data, "kind", "str", where)
    if kind not in (GAUGE, COUNTER):
        raise _fail("power", f"{where}.kind", f"is not {GAUGE!r} or {COUNTER!r}", kind)
    amount = _get("power", data, "value", "number", where)
    wrap = _get("power", data, "wrap_j", "number?", where)
    for key, number in (("value", amount), ("wrap_j", wrap)):
        if number is not None and not 0 <= number < float("inf"):
            raise _fail("power", f"{where}.{key}", "is not a finite number >= 0", number)
    return PowerReading(names[0], names[1], names[2], kind, amount, wrap)


# -- serve-health, serve-probe -----------------------------------------------------------------
@dataclass(frozen=True)
class ServeHealth:
    """``serve-health``: the server answered /health; the ids of the models it lists."""

    models: tuple[str | None, ...]

    def to_dict(self) -> JsonObject:
        return {"models": list(self.models)}


def parse_serve_health(text: str) -> ServeHealth:
    data = _object("serve-health", _load("serve-health", text))
    models = _get("serve-health", data, "models", "list")
    for index, model in enumerate(models):
        if model is not None and not isinstance(model, str):
            raise _fail("serve-health", f"models[{index}]", "is not a string or null", model)
    return ServeHealth(tuple(models))


@dataclass(frozen=True)
class ServeProbe:
    """``serve-probe``: one greedy completion; the tokens the server says it generated and
    the seconds it took."""

    model: str
    completion_tokens: int
    seconds: float

    def to_dict(self) -> JsonObject:
        return {
            "model": self.model,
            "completion_tokens": self.completion_tokens,
            "seconds": self.seconds,
        }


def parse_serve_probe(text: str) -> ServeProbe:
    data = _object("serve-probe", _load("serve-probe", text))
    return ServeProbe(
        _get("serve-probe", data, "model", "str"),
        _get("serve-probe", data, "completion_tokens", "int"),
        _get("serve-probe", data, "seconds", "number"),
    )


# -- serve-tokens ------------------------------------------------------------------------------
MAX_TOKEN_CHARS = 256  # one token's text: a few bytes in any vocabulary
MAX_ANSWERS = 64
MAX_STEPS = 256  # serve-tokens --tokens at most


@dataclass(frozen=True)
class TokenStep:
    """One generated token: its text, its id where the engine gives one, its log-probability
    and the likeliest alternatives there, as (key, log-probability) with ``key`` as
    ``TokenStep.key`` writes it."""

    token: str
    id: int | None
    logprob: float | None
    top: tuple[tuple[str, float], ...] = ()

    @property
    def key(self) -> str:
        """What identifies the token: its id where known ("#123"), else its text."""
        return f"#{self.id}" if self.id is not None else self.token

    def to_dict(self) -> JsonObject:
        return {
            "token": self.token,
            "id": self.id,
            "logprob": self.logprob,
            "top": [[key, lp] for key, lp in self.top],
        }


@dataclass(frozen=True)
class TokenAnswer:
    """The greedy answer to one prompt: its text and its tokens (none when the engine
    returned no log-probabilities: the text alone is then compared)."""

    text: str
    steps: tuple[TokenStep, ...]

    def to_dict(self) -> JsonObject:
        return {"text": self.text, "steps": [s.to_dict() for s in self.steps]}


@dataclass(frozen=True)
class ServeTokens:
    """``serve-tokens``: the served model's greedy answer to each prompt, in order."""

    model: str
    answers: tuple[TokenAnswer, ...]

    def to_dict(self) -> JsonObject:
        return {"model": self.model, "answers": [a.to_dict() for a in self.answers]}


def _step(command: str, value: Any, where: str) -> TokenStep:
    data = _object(command, value, where)
    token = _get(command, data, "token", "str", where)
    if len(token) > MAX_TOKEN_CHARS:
        raise _fail(command, f"{where}.token", "is too long for a token", token)
    found = _get(command, data, "id", "int?", where)
    logprob = _get(command, data, "logprob", "number?", where)
    top = []
    for index, pair in enumerate(_get(command, data, "top", "list", where)[:MAX_ANSWERS]):
        place = f"{where}.top[{index}]"
        pair = _list(command, pair, place)
        if len(pair) != 2 or not isinstance(pair[0], str) or not _is("number", pair[1]):
            raise _fail(command, place, "is not [token, logprob]", pair)
        top.append((pair[0][:MAX_TOKEN_CHARS], _float(command, place, pair[1])))
    return TokenStep(token, found, logprob, tuple(top))


def token_answer_from_dict(command: str, value: Any, where: str) -> TokenAnswer:
    """One answer as ``TokenAnswer.to_dict`` wrote it (a WireError naming ``where``)."""
    data = _object(command, value, where)
    text = _get(command, data, "text", "str", where)
    steps = _get(command, data, "steps", "list", where)
    if len(steps) > MAX_STEPS:
        raise _fail(command, f"{where}.steps", f"has more than {MAX_STEPS}", len(steps))
    return TokenAnswer(
        text, tuple(_step(command, s, f"{where}.steps[{i}]") for i, s in enumerate(steps))
    )


def parse_serve_tokens(text: str) -> ServeTokens:
    data = _object("serve-tokens", _load("serve-tokens", text))
    model = _get("serve-tokens", data, "model", "str")
    answers = _get("serve-tokens", data, "answers", "list")
    if len(answers) > MAX_ANSWERS:
        raise _fail("serve-tokens", "answers", f"has more than {MAX_ANSWERS}", len(answers))
    return ServeTokens(
        model,
        tuple(
            token_answer_from_dict("serve-tokens", a, f"answers[{i}]")
            for i, a in enumerate(answers)
        ),
    )


# -- gguf-layers -------------------------------------------------------------------------------
def parse_gguf_layers(text: str) -> int:
    """``gguf-layers``: the model's number of transformer blocks, alone on a line."""
    stripped = text.strip()
    if not (stripped.isascii() and stripped.isdigit()):
        raise _fail("gguf-layers", "", "not a layer count", text)
    if len(stripped) > len(str(MAX_BLOCKS)) or not 0 < int(stripped) <= MAX_BLOCKS:
        # never llama.cpp's --n-gpu-layers: no model has as many (modelstore/gguf_header.py)
        raise _fail("gguf-layers", "", f"not a model's layer count (1 to {MAX_BLOCKS})", stripped)
    return int(stripped)


# -- ray-nodes ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class RayNode:
    """One node of Ray's table: its address, whether it is alive, its resources."""

    address: str
    alive: bool
    resources: Mapping[str, float]

    def to_dict(self) -> JsonObject:
        return {"address": self.address, "alive": self.alive, "resources": dict(self.resources)}


def parse_ray_nodes(text: str) -> tuple[RayNode, ...]:
    nodes = []
    for index, value in enumerate(_list("ray-nodes", _load("ray-nodes", text))):
        where = f"[{index}]"
        node = _object("ray-nodes", value, where)
        resources = _get("ray-nodes", node, "resources", "object", where)
        amounts = {
            name: _get("ray-nodes", resources, name, "number", f"{where}.resources")
            for name in resources
        }
        nodes.append(
            RayNode(
                _get("ray-nodes", node, "address", "str", where),
                _get("ray-nodes", node, "alive", "bool", where),
                amounts,
            )
        )
    return tuple(nodes)


# -- net-probe ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ping:
    """``net-probe ping``: round trips of ``size`` bytes; latency one way (half the RTT)."""

    size: int
    samples: int
    p50_us: float
    p99_us: float
    avg_us: float
    tool: str = "builtin"

    def to_dict(self) -> JsonObject:
        return {
            "tool": self.tool,
            "size": self.size,
            "samples": self.samples,
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
            "avg_us": self.avg_us,
        }


@dataclass(frozen=True)
class Stream:
    """``net-probe stream``: ``streams`` parallel TCP streams; what the server counted."""

    streams: int
    gbps: float
    tool: str = "builtin"

    def to_dict(self) -> JsonObject:
        return {"tool": self.tool, "streams": self.streams, "gbps": self.gbps}


def parse_ping(text: str) -> Ping:
    command = "net-probe ping"
    data = _object(command, _load(command, text))
    tool = _get(command, data, "tool", "str")
    size, samples = (_get(command, data, key, "int") for key in ("size", "samples"))
    keys = ("p50_us", "p99_us", "avg_us")
    p50, p99, avg = (_get(command, data, key, "number") for key in keys)
    return Ping(size, samples, p50, p99, avg, tool)


def parse_stream(text: str) -> Stream:
    command = "net-probe stream"
    data = _object(command, _load(command, text))
    tool = _get(command, data, "tool", "str")
    streams = _get(command, data, "streams", "int")
    return Stream(streams, _get(command, data, "gbps", "number"), tool)


# -- setup -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SetupStep:
    """One setup step of a node, as ``setup/steps.py``'s ``Step.to_dict`` writes it."""

    id: str
    title: str
    done: bool
    commands: tuple[str, ...]
    reboot: bool
    check: str | None
    note: str

    def to_dict(self) -> JsonObject:
        return {**self.__dict__, "commands": list(self.commands)}


@dataclass(frozen=True)
class Setup:
    """``setup``: the node's setup steps (after applying them, when asked), under its hostname."""

    host: str
    steps: tuple[SetupStep, ...]
    reboot_needed: bool
    applied: tuple[str, ...]

    def to_dict(self) -> JsonObject:
        body: JsonObject = {
            "steps": [s.to_dict() for s in self.steps],
            "reboot_needed": self.reboot_needed,
            "applied": list(self.applied),
        }
        return {"nodes": {self.host: body}}


def parse_setup(text: str) -> Setup:
    nodes = _get("setup", _object("setup", _load("setup", text)), "nodes", "object")
    if len(nodes) != 1:
        raise _fail("setup", "nodes", "does not name one node", sorted(nodes))
    host, value = next(iter(nodes.items()))
    where = f"nodes[{host!a}]"
    body = _object("setup", value, where)
    steps = []
    for index, item in enumerate(_get("setup", body, "steps", "list", where)):
        steps.append(_setup_step(_object("setup", item, f"{where}.steps[{index}]"), index, where))
    applied = _get("setup", body, "applied", "list", where)
    return Setup(
        host,
        tuple(steps),
        _get("setup", body, "reboot_needed", "bool", where),
        _strings("setup", applied, f"{where}.applied"),
    )


def _setup_step(step: Mapping[str, Any], index: int, where: str) -> SetupStep:
    at = f"{where}.steps[{index}]"

    def get(key: str, kind: str) -> Any:
        return _get("setup", step, key, kind, at)

    return SetupStep(  # read in the order printed: the first problem is the one named
        get("id", "str"),
        get("title", "str"),
        get("done", "bool"),
        _strings("setup", get("commands", "list"), f"{at}.commands"),
        get("reboot", "bool"),
        get("check", "str?"),
        get("note", "str"),
    )


# -- node-info, inventory ----------------------------------------------------------------------
@dataclass(frozen=True)
class NodeInfo:
    """``node-info``: the halo version of the node code and the Python running it."""

    halo: str
    python: str

    def to_dict(self) -> JsonObject:
        return {"halo": self.halo, "python": self.python}


def parse_node_info(text: str) -> NodeInfo:
    data = _object("node-info", _load("node-info", text))
    halo, python = (_get("node-info", data, key, "str") for key in ("halo", "python"))
    return NodeInfo(halo, python)


def parse_inventory(text: str) -> Inventory:
    """``inventory``: the node's facts (``facts/model.py``)."""
    data = _object("inventory", _load("inventory", text))
    try:
        return inventory_from_dict(data)
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        reason = ascii(str(err)[:120])[1:-1]
        raise WireError(f"inventory: not an inventory ({type(err).__name__}: {reason})") from None
