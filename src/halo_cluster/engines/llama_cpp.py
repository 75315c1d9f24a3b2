"""llama.cpp over RPC: a GGUF model's layers spread over ``ggml-rpc-server`` workers on the
fabric, ``llama-server`` on the head. No Ray: the plans come from the nodes' facts.

Every node that takes part runs one program in the background, with its log and pid file
where ``halo logs``, ``halo status`` and ``halo stop`` find them: the workers
``ggml-rpc-server``, the head ``llama-server``. The engine's own witness: llama-server's
lines (which endpoints, the layers offloaded) and rpc-server's (its endpoint, its transport,
the connections it accepted). The API key reaches llama-server through its environment
(``LLAMA_API_KEY``), never argv.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halo_cluster.bounded.jsonin import loads
from halo_cluster.capacity.estimate import GIB, kv_bytes_per_token
from halo_cluster.client.fanout import each
from halo_cluster.config import Config, NodeConfig, ServeConfig
from halo_cluster.config.section import Section
from halo_cluster.engines import llama_cpp_argv as argv
from halo_cluster.engines import llama_cpp_layouts, process, scripts
from halo_cluster.engines.llama_cpp_argv import LlamaCppOptions, Worker
from halo_cluster.engines.protocol import (
    ModelMemory,
    Prepared,
    ServeContext,
    ServeRequest,
    Witness,
)
from halo_cluster.engines.start import Ready, StartPlan, launch
from halo_cluster.errors import LifecycleError, ModelError, UsageError, WireError
from halo_cluster.jsonout import JsonObject
from halo_cluster.modelstore.rpc_cache import CacheUse, parse_cache_use
from halo_cluster.wire.answers import parse_gguf_layers
from halo_cluster.wire.args import gguf_layers_args
from halo_cluster.wire.commands import RPC_CACHE
from halo_cluster.witness.logs import llama_problems, llama_recheck
from halo_cluster.witness.nccl_log import parse_logs

if TYPE_CHECKING:
    from halo_cluster.capacity.gguf_file import GgufModel

NO_NCCL = parse_logs([]).to_dict()  # llama.cpp has no NCCL: its verdict is empty


RPC_READY_S = 30
FIT_MIN_CTX = 4096  # llama.cpp fits an unset context to free memory, never below this


def local_model(model: str) -> GgufModel | None:
    """The model's GGUF header and tensor table, when the file is here (None when it is
    not, or the gguf package is missing: the head is asked). A corrupt or truncated file is
    a UsageError naming it."""
    import importlib.util

    path = Path(model)
    if not os.path.isfile(path) or importlib.util.find_spec("gguf") is None:
        return None
    from halo_cluster.capacity.gguf_file import read_gguf

    return read_gguf(path)


def kv_tokens(serve: ServeConfig, trained: int | None) -> tuple[int, str]:
    """The KV cache's tokens llama-server will hold at least, and how that was counted:
    ``--ctx-size`` when max_model_len is set (every slot's), else llama.cpp's own fit (the
    model's trained context, down to FIT_MIN_CTX when memory is short)."""
    slots = serve.max_num_seqs or 4
    if serve.max_model_len:
        return serve.max_model_len * slots, f"KV for {slots} x {serve.max_model_len} tokens"
    tokens = min(trained or FIT_MIN_CTX, FIT_MIN_CTX)
    return tokens, f"KV for at least {tokens} tokens (llama.cpp fits an unset context)"


class LlamaCpp:
    name = "llama.cpp"
    member = "rpc-server"
    weights_on_head = True
    owned = argv.OWNED
    model_format = "gguf"
    layout_examples = llama_cpp_layouts.EXAMPLES
    layouts = staticmethod(llama_cpp_layouts.layouts)
    layout = staticmethod(llama_cpp_layouts.parse)

    def options(self, section: Section | None, flags: Mapping[str, Any]) -> LlamaCppOptions:
        if any(flags.get(k) is not None for k in ("tp", "pp", "executor")):
            raise UsageError(
                "--tp, --pp and --executor are vLLM's: llama.cpp splits the layers over the "
                "nodes (--nodes N: the first N)"
            )
        return LlamaCppOptions.from_section(section)

    def check(self, config: Config, request: ServeRequest) -> None:
        """An absolute GGUF path (read on the head), and every worker on an address of its
        own: rpc-server has no authentication and never listens on all. One node: the head's
        llama-server alone, no RPC."""
        if not request.model.startswith("/"):
            raise UsageError(
                f"{request.model}: give the GGUF file's absolute path "
                f"(it is read on {config.head.name})"
            )
        for node in config.nodes[1:]:
            if (node.fabric_address or "") in ("", "0.0.0.0", "::"):
                raise UsageError(
                    f"{node.name}: rpc-server has no authentication and listens only on a "
                    "node's fabric address: set its fabric_address in halo.toml"
                )

    def uses_ray(self, options: Any) -> bool:
        return False

    def watches_ray(self, executor: str | None) -> bool:
        return False

    def label(self, executor: str | None) -> str:
        return "llama.cpp over RPC"

    def named(self, name: str) -> tuple[str, ...]:
        return ("--alias", name)

    def describe(self, engine: Mapping[str, Any]) -> list[str]:
        rpc = engine.get("rpc") or {}
        lines = [
            f"engine: llama.cpp over RPC ({engine.get('transport') or 'no workers'}), "
            f"{engine.get('offloaded_layers')} layer(s) on the workers, "
            f"{engine.get('head_layers')} on the head"
        ]
        lines += [f"  llama-server: {line}" for line in rpc.get("evidence", [])[:6]]
        for worker in rpc.get("workers", []):
            name = str(worker["source"]).split(":", 1)[0]
            lines.append(
                f"  {name}: rpc-server at {worker['endpoint']}, {worker['transport']}, "
                f"{worker['clients']} connection(s) accepted"
            )
        return lines

    # -- prepare --------------------------------------------------------------------------
    def prepare(self, ctx: ServeContext) -> Prepared:
        workers = self._workers(ctx)
        (layers, local), rdma_builds = self._preflight(ctx, workers)
        workers = [self._with_transport(ctx, w, rdma_builds) for w in workers]
        self._trim_caches(ctx, workers)
        rdma = bool(workers) and all(w.transport == "rdma" for w in workers)
        members = [ctx.head, *[w.node for w in workers]]
        # the GGUF as read here (None: only the head has it), kept for the memory check
        return Prepared(members, rdma, "llama.cpp-rpc", None, (workers, layers, local))

    def _trim_caches(self, ctx: ServeContext, workers: list[Worker]) -> None:
        """Each worker's RPC tensor cache trimmed to ``cache_gib`` before its rpc-server
        starts (rpc-server never removes a tensor): the ones used longest ago go first. A
        cache that cannot be trimmed is one line, and the serve goes on."""
        options: LlamaCppOptions = ctx.request.options
        store, quota = ctx.config.models.dir, options.cache_bytes

        def trim(worker: Worker) -> tuple[str, CacheUse | str]:
            node = worker.node
            result = ctx.client(node).call(*RPC_CACHE.argv(store=store, quota_bytes=quota))
            if not result.ok:
                return node.name, result.error_text().removeprefix("halo: error: ").strip()
            try:
                return node.name, parse_cache_use(loads(result.stdout))
            except (ValueError, ModelError) as err:
                return node.name, f"an answer halo cannot read ({err})"

        for name, used in each(workers, trim):
            if isinstance(used, str):
                ctx.progress(f"{name}: the RPC tensor cache was not trimmed: {used}")
            elif used.removed_files:
                ctx.progress(
                    f"{name}: RPC tensor cache trimmed to {used.bytes / GIB:.1f} GiB of "
                    f"{options.cache_gib:g} ({used.removed_files} file(s), "
                    f"{used.removed_bytes / GIB:.1f} GiB removed, the least recently used)"
                )

    def _workers(self, ctx: ServeContext) -> list[Worker]:
        """Every node but the head, each on its configured fabric address (TCP until the
        builds are known: ``_with_transport``); a node whose plan uses another address is
        refused (``check`` refused those without one)."""
        workers = []
        for node in ctx.config.nodes[1:]:
            plan = ctx.plans[node.name]
            address = node.fabric_address or ""
            if plan.address and plan.address != address:
                raise UsageError(
                    f"{node.name}: its plan uses {plan.address}, not its fabric_address "
                    f"{address}: check the node's addresses ('halo doctor')"
                )
            workers.append(Worker(node, address, "tcp"))
        return workers

    def _with_transport(self, ctx: ServeContext, worker: Worker, rdma: dict[str, bool]) -> Worker:
        """RDMA when the head's and the worker's plans are RDMA and both builds have it."""
        both = rdma.get(ctx.head.name, False) and rdma.get(worker.node.name, False)
        planned = ctx.plans[ctx.head.name].is_rdma and ctx.plans[worker.node.name].is_rdma
        return Worker(worker.node, worker.address, argv.rpc_transport(planned, both))

    def _preflight(
        self, ctx: ServeContext, workers: list[Worker]
    ) -> tuple[tuple[int, GgufModel | None], dict[str, bool]]:
        """Programs on every node, the same build everywhere, the GGUF file on the head, the
        ports free; returns the model's layer count (with the GGUF when it is readable here)
        and which nodes' builds have RDMA."""
        ctx.progress("checking llama.cpp, the model and the ports on every node")
        options: LlamaCppOptions = ctx.request.options
        serve, model = ctx.request.serve, ctx.request.model
        rpc = argv.binary(options, argv.RPC_SERVER)
        head_program = argv.binary(options, argv.LLAMA_SERVER)
        by_name = {w.node.name: w for w in workers}

        def check(node: NodeConfig) -> tuple[NodeConfig, Any]:
            if node is ctx.head:
                port = (scripts.local_host(serve.host), serve.port)
                script = argv.preflight_script(head_program, model, port)
            else:
                port = (by_name[node.name].address, options.rpc_port)
                script = argv.preflight_script(rpc, None, port)
            return node, ctx.client(node).script(script, 30)

        builds: dict[str, str | None] = {}
        rdma: dict[str, bool] = {}
        for node, result in each([ctx.head, *[w.node for w in workers]], check):
            if not result.ok:
                reason = argv.PREFLIGHT.get(result.returncode)
                if reason is None:
                    raise LifecycleError(f"{node.name}: cannot check it: {result.error_text()}")
                program = head_program if node is ctx.head else rpc
                port = serve.port if node is ctx.head else options.rpc_port
                raise UsageError(
                    f"{node.name}: " + reason.format(program=program, model=model, port=port)
                )
            builds[node.name] = argv.build_identity(result.stdout)
            rdma[node.name] = argv.build_has_rdma(result.stdout)
        self._same_build(ctx, workers, builds)
        return self._layers(ctx, model), rdma

    def _same_build(
        self, ctx: ServeContext, workers: list[Worker], builds: dict[str, str | None]
    ) -> None:
        reference = builds.get(ctx.head.name)
        for worker in workers:
            found = builds.get(worker.node.name)
            if reference and found and found != reference:
                raise UsageError(
                    f"{worker.node.name}: its llama.cpp build differs from {ctx.head.name}'s "
                    f"(rpc-server sha256 {found[:12]} vs {reference[:12]}): the RPC protocol "
                    "must match; install the same build on every node"
                )

    def _layers(self, ctx: ServeContext, model: str) -> tuple[int, GgufModel | None]:
        try:
            found = local_model(model)
        except UsageError as err:
            raise UsageError(f"{ctx.head.name}: {err}") from None
        if found is not None:
            return found.spec.layers, found
        # not readable here: ask the head, where llama-server will read it
        result = ctx.client(ctx.head).call(*gguf_layers_args(model))
        if result.ok:
            try:
                return parse_gguf_layers(result.stdout), None
            except WireError as err:
                raise UsageError(f"{ctx.head.name}: {err}") from None
        said = result.error_text().removeprefix("halo: error: ").strip()
        raise UsageError(f"{ctx.head.name}: {said or f'cannot read {model}'}")

    # -- memory ---------------------------------------------------------------------------
    def memory(self, ctx: ServeContext, prepared: Prepared) -> ModelMemory:
        """The planner's split: the head keeps the first layers, the workers an equal part of
        the rest and the output (``offload_layers``); each node's KV cache is that of its
        layers. Weights and KV from the GGUF header when the file is here, else the file's
        size on the head and no KV (the header is read where the file is)."""
        workers, layers, found = prepared.detail
        total = layers + 1
        offload = argv.offload_layers(layers, len(workers))
        shares = {ctx.head.name: (total - offload) / total}
        shares.update({w.node.name: offload / len(workers) / total for w in workers})
        if found is None:
            note = f"KV cache not counted: the model's header is read on {ctx.head.name}"
            return ModelMemory(
                shares, {}, note, size_path=ctx.request.model, size_on=ctx.head.name,
                weights_path=ctx.request.model, opened_on=(ctx.head.name,),
            )  # fmt: skip
        tokens, note = kv_tokens(ctx.request.serve, found.spec.context_limit)
        kv_all = kv_bytes_per_token(found.spec, 1, 1, "fp16") * tokens  # llama.cpp's f16 cache
        kv = {name: kv_all * share for name, share in shares.items()}
        return ModelMemory(
            shares, kv, note, weights_bytes=found.weights.total,
            weights_path=ctx.request.model, opened_on=(ctx.head.name,),
        )  # fmt: skip

    # -- launch ---------------------------------------------------------------------------
    def start_plan(self, ctx: ServeContext, prepared: Prepared) -> StartPlan:
        """rpc-server on every worker, each reached from the head over the fabric (the path
        llama-server will take), then llama-server on the head with all of them."""
        workers, layers, _local = prepared.detail
        options: LlamaCppOptions = ctx.request.options
        if workers:
            ctx.progress(argv.NO_AUTH_NOTE)
        cache = argv.rpc_cache_dir(ctx.config.models.dir)
        rpc = []
        for worker in workers:
            node = worker.node
            endpoint = worker.endpoint(options.rpc_port)
            rpc.append(launch(
                node.name, "rpc-server", argv.rpc_server_argv(options, worker.address),
                {**dict(node.env), **argv.rpc_env(worker.transport, cache)},
                f"starting rpc-server on {node.name} at {endpoint} ({worker.transport.upper()})",
                Ready(worker.address, options.rpc_port, RPC_READY_S),
            ))  # fmt: skip
        endpoints = [w.endpoint(options.rpc_port) for w in workers]
        model = ctx.request.model
        command = argv.llama_server_argv(ctx.request.serve, options, model, endpoints, layers)
        env = {**dict(ctx.head.env), **({"LLAMA_API_KEY": ctx.api_key} if ctx.api_key else {})}
        offload = argv.offload_layers(layers, len(workers))
        title = (
            f"starting llama-server {model} on {ctx.head.name} "
            f"({offload}/{layers + 1} layers on {len(workers)} worker(s))"
        )
        server = launch(ctx.head.name, "llama-server", command, env, title)
        return StartPlan((tuple(rpc), (server,)) if rpc else ((server,),))

    # -- witness --------------------------------------------------------------------------
    def witness(self, ctx: ServeContext, prepared: Prepared) -> Witness:
        workers, layers, _local = prepared.detail
        options: LlamaCppOptions = ctx.request.options
        cluster = ctx.config.name
        head_text = process.log_text(ctx.client(ctx.head), cluster)
        worker_logs = [
            (f"{w.node.name}:serve.log", process.log_text(ctx.client(w.node), cluster))
            for w in workers
        ]
        expected = {
            f"{w.node.name}:serve.log": (w.endpoint(options.rpc_port), w.transport) for w in workers
        }
        offload = argv.offload_layers(layers, len(workers))
        recheck = llama_recheck(ctx.head.name, expected, offload)
        verdict, problems = llama_problems(
            head_text.splitlines(), [(s, t.splitlines()) for s, t in worker_logs], recheck
        )
        transports = {w.transport for w in workers}
        transport = "/".join(sorted(transports)) if transports else None
        path = "rdma" if prepared.rdma else "socket"
        ranks = [
            {"rank": i, "node": w.node.name, "address": w.endpoint(options.rpc_port)}
            for i, w in enumerate(workers)
        ]
        engine: JsonObject = {
            "engine": self.name,
            "rpc": verdict.to_dict(),
            "transport": transport,
            "offloaded_layers": offload,
            "security": argv.NO_AUTH_NOTE,
            "head_layers": None if verdict.layers is None else verdict.layers - offload,
        }
        return Witness(
            expected=path,
            verdict=NO_NCCL,
            engine=engine,
            ranks=ranks,
            problems=problems,
            transport=path,
            recheck=recheck,
            summary={
                "backend": f"rpc-{transport or 'none'}",
                "init_method": None,
                "nodes": [m.name for m in prepared.members],
            },
        )


ENGINE = LlamaCpp()
