"""llama.cpp's own lines -> which RPC endpoints the model used and over which transport (pure).

The head's ``llama-server`` (at ``--log-verbosity 4``) names every RPC device it loads
onto, with its endpoint, and how many layers went to them:

    I llama_prepare_model_devices: using device RPC0 (198.18.0.6:50052) (unknown id) - 7680 MiB
    I load_tensors: offloaded 2/5 layers to GPU

and each worker's ``ggml-rpc-server`` says where it listens, how, and when a client came:

    Starting RPC server v7.0.0
      endpoint       : 198.18.0.6:50052
      transport      : TCP (RDMA auto-negotiate enabled)
    Accepted client connection
    RDMA activated: qpn=123->456 mtu=4096 rx_depth=24      (only when RDMA was negotiated)

The verdict lists the endpoints in device order, the layers offloaded, and per worker log
its endpoint, the client connections it accepted and whether RDMA was activated; the caller
checks them against each worker's plan (``check_rpc``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from halo_cluster.jsonout import JsonObject
from halo_cluster.witness.engine_log import clean

_DEVICE = re.compile(r"using device (?P<name>RPC\d+) \((?P<endpoint>[^)\s]+)\)")
_OFFLOADED = re.compile(r"offloaded (?P<done>\d+)/(?P<total>\d+) layers")
_ENDPOINT = re.compile(r"^\s*endpoint\s*:\s*(?P<endpoint>\S+)\s*$")
_TRANSPORT = re.compile(r"^\s*transport\s*:\s*(?P<transport>.+?)\s*$")
_VERSION = re.compile(r"Starting RPC server v(?P<version>[\d.]+)")
LIMIT_LINES = 200_000  # a log is read up to this many lines (a server that ran for days)


@dataclass(frozen=True)
class RpcWorkerLog:
    """What one ``ggml-rpc-server`` log says."""

    source: str
    version: str | None
    endpoint: str | None
    transport: str | None  # the line as printed: "TCP" or "TCP (RDMA auto-negotiate enabled)"
    clients: int  # connections accepted
    rdma_activated: int  # connections that switched to RDMA
    evidence: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class LlamaVerdict:
    devices: tuple[tuple[str, str], ...]  # (RPC0, endpoint) in the head's device order
    offloaded: int | None
    layers: int | None  # offloadable layers (the model's blocks + the output layer)
    workers: tuple[RpcWorkerLog, ...]
    evidence: tuple[str, ...] = field(default=())

    @property
    def endpoints(self) -> list[str]:
        return [endpoint for _name, endpoint in self.devices]

    def to_dict(self) -> JsonObject:
        data = asdict(self)
        data["devices"] = [{"name": n, "endpoint": e} for n, e in self.devices]
        return data


def parse_head_log(
    lines: Iterable[str],
) -> tuple[list[tuple[str, str]], int | None, int | None, list[str]]:
    """(devices, offloaded, layers, evidence lines) from ``llama-server``'s log."""
    devices: list[tuple[str, str]] = []
    offloaded = layers = None
    evidence: list[str] = []
    for number, raw in enumerate(lines):
        if number >= LIMIT_LINES:
            break
        line = clean(raw).strip()
        device = _DEVICE.search(line)
        if device and (device["name"], device["endpoint"]) not in devices:
            devices.append((device["name"], device["endpoint"]))
            evidence.append(line)
        found = _OFFLOADED.search(line)
        if found:
            offloaded, layers = int(found["done"]), int(found["total"])
            evidence.append(line)
    return devices, offloaded, layers, evidence


def parse_worker_log(source: str, lines: Iterable[str]) -> RpcWorkerLog:
    version = endpoint = transport = None
    clients = rdma = 0
    evidence: list[str] = []
    for number, raw in enumerate(lines):
        if number >= LIMIT_LINES:
            break
        line = clean(raw).rstrip()
        if found := _VERSION.search(line):
            version = found["version"]
            evidence.append(line.strip())
        elif found := _ENDPOINT.match(line):
            endpoint = found["endpoint"]
            evidence.append(line.strip())
        elif found := _TRANSPORT.match(line):
            transport = found["transport"]
            evidence.append(line.strip())
        elif line.strip() == "Accepted client connection":
            clients += 1
        elif line.startswith("RDMA activated"):
            rdma += 1
            evidence.append(line.strip())
    return RpcWorkerLog(source, version, endpoint, transport, clients, rdma, tuple(evidence))


def parse_llama_logs(
    head: Iterable[str], workers: Iterable[tuple[str, Iterable[str]]]
) -> LlamaVerdict:
    devices, offloaded, layers, evidence = parse_head_log(head)
    parsed = tuple(parse_worker_log(source, lines) for source, lines in workers)
    return LlamaVerdict(tuple(devices), offloaded, layers, parsed, tuple(evidence))


def check_rpc(
    verdict: LlamaVerdict, expected: Mapping[str, tuple[str, str]], offload: int
) -> list[str]:
    """Problems with where the model went. ``expected``: worker log source -> (endpoint on
    its fabric address, planned transport "tcp"/"rdma"); ``offload``: layers asked for."""
    problems: list[str] = []
    used = set(verdict.endpoints)
    by_source = {w.source: w for w in verdict.workers}
    for source, (endpoint, transport) in expected.items():
        node = source.split(":", 1)[0]
        if endpoint not in used:
            problems.append(f"llama-server's log shows no device at {endpoint} ({node})")
        log = by_source.get(source)
        if log is None or log.endpoint is None:
            problems.append(f"{node}: rpc-server's log does not say where it listens")
            continue
        if log.endpoint != endpoint:
            problems.append(
                f"{node}: rpc-server listens on {log.endpoint}, the plan's fabric endpoint is "
                f"{endpoint}"
            )
        if log.clients == 0:
            problems.append(f"{node}: rpc-server accepted no connection from the head")
        if transport == "rdma" and log.rdma_activated == 0:
            problems.append(f"{node}: RDMA was planned but the RPC connection stayed on TCP")
        if transport == "tcp" and log.rdma_activated:
            problems.append(f"{node}: the RPC connection switched to RDMA although TCP was planned")
    strays = used - {endpoint for endpoint, _t in expected.values()}
    for endpoint in sorted(strays):
        problems.append(f"llama-server used a device at {endpoint}, which is no planned worker")
    if offload and verdict.offloaded is not None and verdict.offloaded < offload:
        problems.append(
            f"llama-server offloaded {verdict.offloaded} layers to the workers, {offload} asked"
        )
    return problems
