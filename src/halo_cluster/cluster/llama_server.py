"""``halo serve --engine llama.cpp``: a GGUF model's layers spread over ``ggml-rpc-server``
workers on the fabric, ``llama-server`` on the head, then the same two witnesses as vLLM:
llama.cpp's own lines (which endpoints, which transport) and every node's counters during
a probe request (bytes per generated token on the fabric, management and RDMA paths).

Every node that takes part runs one program in the background, with its log and pid file
where ``halo logs``, ``halo status`` and ``halo stop`` find them: the workers
``ggml-rpc-server``, the head ``llama-server``. The API key reaches llama-server through
its environment (``LLAMA_API_KEY``), never argv.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from halo_cluster.cluster import llama_plan
from halo_cluster.cluster.lifecycle import LifecycleError, update_state
from halo_cluster.cluster.serve_plan import background_script, local_host
from halo_cluster.cluster.serve_result import ServeResult, state_summary
from halo_cluster.config import NodeConfig, ServeConfig
from halo_cluster.errors import UsageError
from halo_cluster.llama_log import check_rpc, parse_llama_logs
from halo_cluster.transport import TransportPlan

if TYPE_CHECKING:
    from halo_cluster.cluster.serve import Server

RPC_READY_S = 30


def model_layers(model: str) -> int | None:
    """The model's block count from its GGUF header and tensor table, when the file is here
    (None when it is not, or the gguf package is missing: the head is asked). A corrupt or
    truncated file is a UsageError naming it."""
    import importlib.util

    path = Path(model)
    if not path.is_file() or importlib.util.find_spec("gguf") is None:
        return None
    from halo_cluster.plan.gguf_file import read_gguf

    return read_gguf(path).spec.layers


class LlamaCpp:
    """One start of llama.cpp over RPC, driven through a ``Server``'s runners and helpers."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.config = server.config
        self.head = server.head

    def start(
        self,
        serve: ServeConfig,
        model: str,
        api_key: str | None,
        wait_s: float,
        plans: dict[str, TransportPlan],
    ) -> ServeResult:
        if not model.startswith("/"):
            raise UsageError(
                f"{model}: give the GGUF file's absolute path (it is read on {self.head.name})"
            )
        if len(self.config.nodes) < 2:
            raise UsageError(
                "llama.cpp over RPC needs at least one worker node besides the head: add a "
                "[[node]], or run llama-server on its own"
            )
        workers = self._workers(plans)
        self.server.stop()
        layers, rdma_builds = self._preflight(serve, model, workers)
        workers = [self._with_transport(w, plans, rdma_builds) for w in workers]
        offload = llama_plan.offload_layers(layers, len(workers))
        return self.server.bring_up(
            serve,
            wait_s,
            lambda: self._launch(serve, model, workers, layers, api_key),
            lambda: self._prove(serve, model, workers, plans, offload),
        )

    def _launch(
        self,
        serve: ServeConfig,
        model: str,
        workers: list[llama_plan.Worker],
        layers: int,
        api_key: str | None,
    ) -> None:
        """rpc-server on every worker, then llama-server on the head with all of them."""
        server = self.server
        nodes = [self.head.name, *[w.node.name for w in workers]]
        update_state(self.config, "serve", {"nodes": nodes})
        self._start_workers(serve, workers)
        endpoints = [w.endpoint(serve.rpc_port) for w in workers]
        argv = llama_plan.llama_server_argv(serve, model, endpoints, layers)
        env = {**dict(self.head.env), **({"LLAMA_API_KEY": api_key} if api_key else {})}
        offload = llama_plan.offload_layers(layers, len(workers))
        server.progress(
            f"starting llama-server {model} on {self.head.name} "
            f"({offload}/{layers + 1} layers on {len(workers)} worker(s))"
        )
        result = server._run(self.head, background_script(env, argv, self.config.name))
        if not result.ok:
            raise LifecycleError(
                f"could not start llama-server on {self.head.name}: {result.error_text()}"
            )

    # -- plan -------------------------------------------------------------------------------
    def _with_transport(
        self, worker: llama_plan.Worker, plans: dict[str, TransportPlan], rdma: dict[str, bool]
    ) -> llama_plan.Worker:
        """RDMA when the head's and the worker's plans are RDMA and both builds have it."""
        both = rdma.get(self.head.name, False) and rdma.get(worker.node.name, False)
        planned = plans[self.head.name].is_rdma and plans[worker.node.name].is_rdma
        transport = llama_plan.rpc_transport(planned, both)
        return llama_plan.Worker(worker.node, worker.address, transport)

    def _workers(self, plans: dict[str, TransportPlan]) -> list[llama_plan.Worker]:
        """Every node but the head, each on its configured fabric address (TCP until the
        builds are known: ``_with_transport``). rpc-server has no authentication: a node
        without a fabric address of its own, or whose plan uses another, is refused."""
        workers = []
        for node in self.config.nodes[1:]:
            plan = plans.get(node.name)
            if plan is None:
                raise LifecycleError(f"{node.name} has no transport plan: run 'halo up' first")
            address = node.fabric_address or ""
            if address in ("", "0.0.0.0", "::"):
                raise UsageError(
                    f"{node.name}: rpc-server has no authentication and listens only on a "
                    "node's fabric address: set its fabric_address in halo.toml"
                )
            if plan.address and plan.address != address:
                raise UsageError(
                    f"{node.name}: its plan uses {plan.address}, not its fabric_address "
                    f"{address}: run 'halo up' again"
                )
            workers.append(llama_plan.Worker(node, address, "tcp"))
        return workers

    def _preflight(
        self, serve: ServeConfig, model: str, workers: list[llama_plan.Worker]
    ) -> tuple[int, dict[str, bool]]:
        """Programs on every node, the same build everywhere, the GGUF file on the head, the
        ports free; returns the model's layer count and which nodes' builds have RDMA."""
        server = self.server
        server.progress("checking llama.cpp, the model and the ports on every node")
        rpc = llama_plan.binary(serve, llama_plan.RPC_SERVER)
        head_program = llama_plan.binary(serve, llama_plan.LLAMA_SERVER)
        by_name = {w.node.name: w for w in workers}

        def check(node: NodeConfig) -> tuple[NodeConfig, Any]:
            if node is self.head:
                port = (local_host(serve.host), serve.port)
                script = llama_plan.preflight_script(head_program, model, port)
            else:
                port = (by_name[node.name].address, serve.rpc_port)
                script = llama_plan.preflight_script(rpc, None, port)
            return node, server._run(node, script, 30)

        builds: dict[str, str | None] = {}
        rdma: dict[str, bool] = {}
        for node, result in server._each([self.head, *[w.node for w in workers]], check):
            if not result.ok:
                reason = llama_plan.PREFLIGHT.get(result.returncode)
                if reason is None:
                    raise LifecycleError(f"{node.name}: cannot check it: {result.error_text()}")
                program = head_program if node is self.head else rpc
                port = serve.port if node is self.head else serve.rpc_port
                raise UsageError(
                    f"{node.name}: " + reason.format(program=program, model=model, port=port)
                )
            builds[node.name] = llama_plan.build_identity(result.stdout)
            rdma[node.name] = llama_plan.build_has_rdma(result.stdout)
        reference = builds.get(self.head.name)
        for worker in workers:
            found = builds.get(worker.node.name)
            if reference and found and found != reference:
                raise UsageError(
                    f"{worker.node.name}: its llama.cpp build differs from {self.head.name}'s "
                    f"(rpc-server sha256 {found[:12]} vs {reference[:12]}): the RPC protocol "
                    "must match; install the same build on every node"
                )
        return self._layers(model), rdma

    def _layers(self, model: str) -> int:
        try:
            found = model_layers(model)
        except UsageError as err:
            raise UsageError(f"{self.head.name}: {err}") from None
        if found is not None:
            return found
        # not readable here: ask the head, where llama-server will read it
        from halo_cluster.cluster.lifecycle import node_script

        argv = self.head.command("gguf-layers", model)
        result = self.server._run(self.head, node_script({}, argv), 60)
        if result.ok and result.stdout.strip().isdigit():
            return int(result.stdout.strip())
        said = result.error_text().removeprefix("halo: error: ").strip()
        raise UsageError(f"{self.head.name}: {said or f'cannot read {model}'}")

    # -- start ------------------------------------------------------------------------------
    def _start_workers(self, serve: ServeConfig, workers: list[llama_plan.Worker]) -> None:
        server = self.server
        if workers:
            server.progress(llama_plan.NO_AUTH_NOTE)

        def start(worker: llama_plan.Worker) -> None:
            node = worker.node
            argv = llama_plan.rpc_server_argv(serve, worker.address)
            env = {**dict(node.env), **llama_plan.rpc_env(worker.transport)}
            server.progress(
                f"starting rpc-server on {node.name} at {worker.endpoint(serve.rpc_port)} "
                f"({worker.transport.upper()})"
            )
            result = server._run(node, background_script(env, argv, self.config.name))
            if not result.ok:
                raise LifecycleError(
                    f"could not start rpc-server on {node.name}: {result.error_text()}"
                )
            # reached from the head, over the fabric: the path llama-server will take
            reach = llama_plan.reach_script(worker.address, serve.rpc_port, RPC_READY_S)
            if not server._run(self.head, reach, RPC_READY_S + 10).ok:
                line = server.fatal_line(node) if not server._alive(node) else "it does not answer"
                raise LifecycleError(
                    f"{node.name}: rpc-server is not reachable at "
                    f"{worker.endpoint(serve.rpc_port)} from {self.head.name}: {line}"
                )

        server._each(workers, start)

    # -- proof ------------------------------------------------------------------------------
    def _prove(
        self,
        serve: ServeConfig,
        model: str,
        workers: list[llama_plan.Worker],
        plans: dict[str, TransportPlan],
        offload: int,
    ) -> ServeResult:
        server = self.server
        head_text = server.log_text(self.head)
        worker_logs = [(f"{w.node.name}:serve.log", server.log_text(w.node)) for w in workers]
        verdict = parse_llama_logs(
            head_text.splitlines(), [(s, t.splitlines()) for s, t in worker_logs]
        )
        expected = {
            f"{w.node.name}:serve.log": (w.endpoint(serve.rpc_port), w.transport) for w in workers
        }
        problems = check_rpc(verdict, expected, offload)
        nodes = [self.head, *[w.node for w in workers]]
        # RDMA counters are asked of every node only when every link is RDMA
        rdma = bool(workers) and all(w.transport == "rdma" for w in workers)
        traffic = server.probe_traffic(serve, nodes, plans, rdma)
        problems += traffic["problems"]
        transports = {w.transport for w in workers}
        transport = "/".join(sorted(transports)) if transports else None
        expected_path = "rdma" if rdma else "socket"
        ranks = [
            {"rank": i, "node": w.node.name, "address": w.endpoint(serve.rpc_port)}
            for i, w in enumerate(workers)
        ]
        engine: dict[str, Any] = {
            "engine": "llama.cpp",
            "rpc": verdict.to_dict(),
            "transport": transport,
            "offloaded_layers": offload,
            "security": llama_plan.NO_AUTH_NOTE,
            "head_layers": None if verdict.layers is None else verdict.layers - offload,
        }
        url, log = server.where(serve)
        result = ServeResult(
            url=url,
            log=log,
            executor="llama.cpp-rpc",
            model=model,
            tp=1,
            expected=expected_path,
            verdict={"transport": "unknown", "networks": [], "evidence": []},
            engine=engine,
            traffic=traffic,
            ranks=ranks,
            proven=None if problems else expected_path,
            problems=problems,
        )
        summary = state_summary(result, serve, self.head.name)
        summary.update(
            engine="llama.cpp",
            nodes=[self.head.name, *[w.node.name for w in workers]],
            backend=f"rpc-{transport or 'none'}",
            init_method=None,
        )
        update_state(self.config, "serve", summary)
        return result
