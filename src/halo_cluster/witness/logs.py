"""The engines' own words as a witness, judged the same way by ``halo serve`` and by the
supervisor on the head after a restart: what the engine's logs must show (a ``Recheck``,
``wire.recheck``, that the engine fills at its first proof) and the problems when they do not.

Pure: the logs come in as text, keyed by node. Standard library only (Python 3.9): the node
side imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from halo_cluster.wire.recheck import LlamaRecheck, Recheck, RpcWorker, VllmRecheck
from halo_cluster.witness.engine_log import check_ranks, parse_engine_logs
from halo_cluster.witness.llama_log import check_rpc, parse_llama_logs
from halo_cluster.witness.nccl_log import parse_logs


def llama_recheck(
    head: str, expected: Mapping[str, tuple[str, str]], offload: int
) -> LlamaRecheck:
    """What llama-server and the rpc-servers' logs must show: ``expected`` maps a worker's
    log source (``node:serve.log``) to (its fabric endpoint, the planned transport)."""
    workers = tuple(RpcWorker(source, e, t) for source, (e, t) in expected.items())
    return LlamaRecheck(head, workers, offload)


def vllm_recheck(
    members: list[tuple[str, str | None]],
    head_address: str | None,
    addresses: Mapping[str, str],
    expected: str,
) -> VllmRecheck:
    """What the ranks' logs must show: ``members`` (node, its planned address) whose logs are
    read, the rendezvous at the head's planned address, every rank on a planned address, and
    NCCL's transport meeting ``expected`` ("rdma" / "socket")."""
    return VllmRecheck(tuple(members), head_address, tuple(addresses.items()), expected)


def llama_problems(
    head_lines: list[str], workers: list[tuple[str, list[str]]], recheck: LlamaRecheck
) -> tuple[Any, list[str]]:
    """(the logs' verdict, the problems) for llama.cpp over RPC."""
    verdict = parse_llama_logs(head_lines, workers)
    expected = {w.source: (w.endpoint, w.transport) for w in recheck.workers}
    return verdict, check_rpc(verdict, expected, recheck.offload)


def vllm_problems(
    logs: list[tuple[str, str | None, list[str]]], recheck: VllmRecheck
) -> tuple[Any, Any, list[str]]:
    """(the engine's verdict, NCCL's verdict, the problems) for vLLM's ranks."""
    engine = parse_engine_logs(logs)
    nccl = parse_logs([(name, lines) for name, _address, lines in logs])
    expected, head_address = recheck.expected, recheck.head_address
    problems: list[str] = []
    if engine.ranks or nccl.transport == "unknown":  # NCCL's log alone also witnesses
        problems += check_ranks(engine, head_address, dict(recheck.addresses), head_address)
    if engine.backend == "gloo" and expected != "socket":
        problems.append("the ranks used Gloo (TCP sockets) although RDMA was planned")
    if nccl.transport != "unknown" and not nccl.meets(expected):
        problems.append(f"NCCL's log shows {nccl.transport}, the plan asked for {expected}")
    return engine, nccl, problems


def log_nodes(recheck: Recheck) -> list[str]:
    """The nodes whose logs the recheck reads."""
    if isinstance(recheck, LlamaRecheck):
        return [recheck.head, *[w.node for w in recheck.workers]]
    return [node for node, _address in recheck.members]


def recheck_problems(recheck: Recheck, logs: Mapping[str, str]) -> list[str]:
    """The problems the engine's logs (node -> text, as read now) show against ``recheck``."""
    if isinstance(recheck, LlamaRecheck):
        workers = [(w.source, logs.get(w.node, "").splitlines()) for w in recheck.workers]
        return llama_problems(logs.get(recheck.head, "").splitlines(), workers, recheck)[1]
    read = [
        (f"{node}:serve.log", address, logs.get(node, "").splitlines())
        for node, address in recheck.members
    ]
    return vllm_problems(read, recheck)[2]
