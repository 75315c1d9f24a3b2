"""What an engine's logs must show again after a restart (its ``Recheck``): the engine fills
one at its first proof (``witness.logs``: ``vllm_recheck``, ``llama_recheck``), the
supervisor's spec carries it to the head, and the supervisor judges the logs it reads there
with it (``witness.logs.recheck_problems``), the same verdict as at ``halo serve``.

Standard library only, Python 3.9: both sides import it. A malformed one is one
``WireError``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from halo_cluster.errors import WireError
from halo_cluster.jsonout import JsonObject

LLAMA_RPC, VLLM = "llama.cpp-rpc", "vllm"


@dataclass(frozen=True)
class VllmRecheck:
    """vLLM's ranks: the members whose logs are read (node, its planned address), the
    rendezvous at the head's planned address, every rank on a planned address (node ->
    address), NCCL's transport meeting ``expected`` ("rdma" or "socket")."""

    members: tuple[tuple[str, str | None], ...]
    head_address: str | None
    addresses: tuple[tuple[str, str], ...]
    expected: str

    def to_dict(self) -> JsonObject:
        return {
            "kind": VLLM,
            "members": [list(m) for m in self.members],
            "head_address": self.head_address,
            "addresses": dict(self.addresses),
            "expected": self.expected,
        }


@dataclass(frozen=True)
class RpcWorker:
    """One rpc-server as llama-server must have reached it."""

    source: str  # its log, "node2:serve.log"
    endpoint: str  # its fabric endpoint, "198.19.1.12:50052"
    transport: str  # the planned transport: "tcp" or "rdma"

    @property
    def node(self) -> str:
        return self.source.split(":", 1)[0]


@dataclass(frozen=True)
class LlamaRecheck:
    """llama.cpp over RPC: llama-server on ``head`` with every worker, ``offload`` layers
    on them."""

    head: str
    workers: tuple[RpcWorker, ...]
    offload: int

    def to_dict(self) -> JsonObject:
        return {
            "kind": LLAMA_RPC,
            "head": self.head,
            "expected": {w.source: [w.endpoint, w.transport] for w in self.workers},
            "offload": self.offload,
        }


Recheck = Union[VllmRecheck, LlamaRecheck]


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise WireError(f"recheck: {where} is not a string")
    return value


def _maybe_text(value: Any, where: str) -> str | None:
    return None if value is None else _text(value, where)


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WireError(f"recheck: {where} is not an object")
    return value


def _vllm(value: dict[str, Any]) -> VllmRecheck:
    members = value.get("members")
    if not isinstance(members, list) or not all(
        isinstance(m, list) and len(m) == 2 for m in members
    ):
        raise WireError("recheck: members is not a list of [node, address] pairs")
    addresses = _object(value.get("addresses"), "addresses")
    return VllmRecheck(
        tuple((_text(n, "a member"), _maybe_text(a, "a member's address")) for n, a in members),
        _maybe_text(value.get("head_address"), "head_address"),
        tuple((_text(k, "a node"), _text(v, "an address")) for k, v in addresses.items()),
        _text(value.get("expected"), "expected"),
    )


def _llama(value: dict[str, Any]) -> LlamaRecheck:
    expected = _object(value.get("expected"), "expected")
    workers = []
    for source, pair in expected.items():
        if not isinstance(pair, list) or len(pair) != 2:
            raise WireError("recheck: a worker is not [endpoint, transport]")
        endpoint, transport = _text(pair[0], "an endpoint"), _text(pair[1], "a transport")
        workers.append(RpcWorker(source, endpoint, transport))
    offload = value.get("offload")
    if not isinstance(offload, int) or isinstance(offload, bool):
        raise WireError("recheck: offload is not a whole number")
    return LlamaRecheck(_text(value.get("head"), "head"), tuple(workers), offload)


def parse_recheck(value: Any) -> Recheck:
    """A recheck as ``to_dict`` wrote it; an unknown kind is a WireError, never a pass."""
    found = _object(value, "the recheck")
    kind = found.get("kind")
    if kind == VLLM:
        return _vllm(found)
    if kind == LLAMA_RPC:
        return _llama(found)
    raise WireError(f"recheck: no way to read this engine's logs again ({kind!r})")
