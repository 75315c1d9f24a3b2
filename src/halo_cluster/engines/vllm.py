"""vLLM, tensor-parallel across the cluster.

Executors:
- ``ray``: one ``vllm serve`` on the head, its ranks Ray actors placed on the nodes (GPUs,
  or the engine resource ``halo up`` declares on CPU-only nodes); needs ``halo up``.
- ``mp``: vLLM's own multi-node executor, one process per node, each started with its own
  node's plan (``--nnodes/--node-rank``; the others ``--headless``); no Ray.

The engine's own witness: NCCL/RCCL's debug log, or on CPU vLLM's Gloo lines (backend,
rendezvous address, each rank's node), checked against the plans. Secrets (the API key,
HF_TOKEN) reach vLLM through the environment of the script fed to ``bash -s`` — vLLM reads
``VLLM_API_KEY`` as its ``--api-key`` — never through argv, logs, state or JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from halo_cluster.client.fanout import each
from halo_cluster.config import Config, NodeConfig, secret
from halo_cluster.config.section import Section
from halo_cluster.engines import process, scripts, vllm_layouts
from halo_cluster.engines.protocol import (
    ModelMemory,
    Prepared,
    ServeContext,
    ServeRequest,
    Witness,
)
from halo_cluster.engines.start import StartPlan, launch
from halo_cluster.engines.vllm_argv import (
    OWNED,
    PREFLIGHT,
    Placement,
    VllmOptions,
    is_local_model,
    placement,
    preflight_script,
    serve_argv,
)
from halo_cluster.errors import LifecycleError, UsageError
from halo_cluster.witness.engine_log import rank_nodes
from halo_cluster.witness.logs import vllm_problems, vllm_recheck

KV_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"  # the CPU build's KV cache per rank, whole GiB

MP_MASTER_PORT = 29517


class Vllm:
    name = "vllm"
    member = "rank"
    weights_on_head = False
    owned = OWNED
    model_format = "hf"
    layout_examples = vllm_layouts.EXAMPLES
    layouts = staticmethod(vllm_layouts.layouts)
    layout = staticmethod(vllm_layouts.parse)

    def options(self, section: Section | None, flags: Mapping[str, Any]) -> VllmOptions:
        options = VllmOptions.from_section(section)
        if flags.get("executor"):
            options = replace(options, executor=str(flags["executor"]))
        if flags.get("tp"):
            options = replace(options, tensor_parallel_size=int(flags["tp"]))
        if flags.get("pp"):
            options = replace(options, pipeline_parallel_size=int(flags["pp"]))
        return options

    def check(self, config: Config, request: ServeRequest) -> None:
        return None  # every refusal needs the nodes' capacity or the nodes themselves

    def uses_ray(self, options: Any) -> bool:
        return bool(options.executor == "ray")

    def watches_ray(self, executor: str | None) -> bool:
        return executor != "mp"

    def label(self, executor: str | None) -> str:
        return f"vLLM, {executor} executor" if executor else "vLLM"

    def named(self, name: str) -> tuple[str, ...]:
        return ("--served-model-name", name)

    def describe(self, engine: Mapping[str, Any]) -> list[str]:
        if not engine.get("backend"):
            return []
        return [
            f"engine: vLLM ranks on {engine['backend']}, rendezvous "
            f"tcp://{engine['init_address']}:{engine['init_port']}"
        ]

    # -- prepare --------------------------------------------------------------------------
    def prepare(self, ctx: ServeContext) -> Prepared:
        options: VllmOptions = ctx.request.options
        pp = options.pipeline_parallel_size
        tp = options.tensor_parallel_size or max(1, len(ctx.config.nodes) // pp)
        world = tp * pp
        places = placement(ctx.config.nodes, ctx.capacity, world, f"--tp {tp}")
        self._preflight(ctx, places)
        members = [ctx.head] if options.executor == "ray" else [p.node for p in places]
        rdma = ctx.plans[ctx.head.name].is_rdma
        return Prepared(members, rdma, options.executor, tp, places, [p.node for p in places])

    def _preflight(self, ctx: ServeContext, places: list[Placement]) -> None:
        """Every node that takes ranks has the engine and the model; the head's port is free."""
        ctx.progress("checking the engine, the model and the port on every node")
        serve, options, model = ctx.request.serve, ctx.request.options, ctx.request.model
        local_model = model if is_local_model(model) else None
        head_port = (scripts.local_host(serve.host), serve.port)

        def check(node: NodeConfig) -> tuple[NodeConfig, Any]:
            port = head_port if node is ctx.head else None
            script = preflight_script(options.command, local_model, port)
            return node, ctx.client(node).script(script, 30)

        nodes = [p.node for p in places]
        if ctx.head not in nodes:
            nodes.insert(0, ctx.head)
        for node, result in each(nodes, check):
            if result.ok:
                continue
            reason = PREFLIGHT.get(result.returncode)
            if reason is None:
                raise LifecycleError(f"{node.name}: cannot check it: {result.error_text()}")
            raise UsageError(
                f"{node.name}: "
                + reason.format(command=options.command, model=model, port=serve.port)
            )

    # -- memory ---------------------------------------------------------------------------
    def memory(self, ctx: ServeContext, prepared: Prepared) -> ModelMemory:
        """Each node holds its ranks' part of the weights (1/TP·PP each: the model's size,
        read on the head); its KV cache is what the CPU build reserves per rank
        (VLLM_CPU_KVCACHE_SPACE, whole GiB) where the node's env sets it. A model named by a
        hub id has no size here: those nodes are left unchecked."""
        places: list[Placement] = prepared.detail
        world = sum(p.ranks for p in places)
        shares = {p.node.name: p.ranks / world for p in places}
        kv: dict[str, float] = {}
        for place in places:
            space = dict(place.node.env).get(KV_SPACE_ENV, "")
            if space.isdigit():
                kv[place.node.name] = int(space) * 1024**3 * place.ranks
        note = (
            f"KV cache: {KV_SPACE_ENV} per rank"
            if len(kv) == len(places)
            else "KV cache not counted where the node's env has no "
            f"{KV_SPACE_ENV}: vLLM sizes it at start and checks it itself"
        )
        model = ctx.request.model
        if not is_local_model(model):
            return ModelMemory(shares, kv, note)
        return ModelMemory(
            shares, kv, note, size_path=model, size_on=ctx.head.name,
            weights_path=model, opened_on=tuple(shares),
        )  # fmt: skip

    # -- launch ---------------------------------------------------------------------------
    def start_plan(self, ctx: ServeContext, prepared: Prepared) -> StartPlan:
        """One ``vllm serve`` per member, all at once: the head alone on Ray (the ranks are
        Ray's), every node with its rank under the mp executor."""
        options: VllmOptions = ctx.request.options
        head_plan = ctx.plans[ctx.head.name]
        master = head_plan.address or ctx.head.host
        launches = []
        for index, node in enumerate(prepared.members):
            mp = None
            if options.executor == "mp":
                mp = (index, len(prepared.members), master, MP_MASTER_PORT)
            argv = serve_argv(
                ctx.request.serve, options, ctx.request.model, prepared.tp or 1, head_plan.apu, mp
            )
            title = (
                f"starting vllm serve {ctx.request.model} (TP={prepared.tp}, "
                f"{options.executor}) on {node.name}"
            )
            launches.append(launch(node.name, "vllm serve", argv, self._env(ctx, node), title))
        return StartPlan((tuple(launches),))

    def _env(self, ctx: ServeContext, node: NodeConfig) -> dict[str, str]:
        env = {
            **ctx.plans[node.name].env,
            **dict(node.env),
            "NCCL_DEBUG": "INFO",
            "NCCL_DEBUG_SUBSYS": "INIT,NET",
            # every rank's start-up line must reach the log (Ray folds lines that differ
            # only in numbers, such as "rank=1")
            "RAY_DEDUP_LOGS": "0",
            **ctx.ray_env,
        }
        for name, value in (("VLLM_API_KEY", ctx.api_key), ("HF_TOKEN", secret("HF_TOKEN"))):
            if value:
                env[name] = value
        return env

    # -- witness --------------------------------------------------------------------------
    def witness(self, ctx: ServeContext, prepared: Prepared) -> Witness:
        places: list[Placement] = prepared.detail
        head_plan = ctx.plans[ctx.head.name]
        expected = "rdma" if prepared.rdma else "socket"
        addresses = {p.node.name: ctx.plans[p.node.name].address or p.node.host for p in places}
        logs = [
            (
                f"{n.name}:serve.log",
                ctx.plans[n.name].address,
                process.log_text(ctx.client(n), ctx.config.name).splitlines(),
            )
            for n in prepared.members
        ]
        recheck = vllm_recheck(
            [(n.name, ctx.plans[n.name].address) for n in prepared.members],
            head_plan.address,
            addresses,
            expected,
        )
        engine, nccl, problems = vllm_problems(logs, recheck)
        where = rank_nodes(engine, addresses, ctx.head.name)
        ranks = [
            {"rank": r.rank, "node": where.get(r.rank), "address": r.address or head_plan.address}
            for r in engine.ranks
        ]
        engine_dict = engine.to_dict()
        return Witness(
            expected=expected,
            verdict=nccl.to_dict(),
            engine=engine_dict,
            ranks=ranks,
            problems=problems,
            transport=nccl.transport if nccl.transport != "unknown" else "socket",
            recheck=recheck,
            summary={
                "backend": engine_dict.get("backend"),
                "init_method": f"tcp://{engine_dict.get('init_address')}:"
                f"{engine_dict.get('init_port')}",
                "nodes": sorted({str(r["node"]) for r in ranks} | {ctx.head.name}),
            },
        )


ENGINE = Vllm()
