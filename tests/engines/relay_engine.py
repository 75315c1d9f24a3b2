"""A third engine, for tests only: what adding an engine to halo takes (docs/architecture.md
walks through it). One module with ``ENGINE``, registered with
``engine_registry.register("relay", "tests.engines.relay_engine")``; its options come from
``[serve.relay]``. It drives a real program (``relay_server.py``): a worker on every node but
the head, bound to its fabric address, and the head's API server, which moves bytes to every
worker for each token. halo's bring-up does the rest: plans without Ray, /health, warm-up,
the counters witness, stop on failure, status."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from halo_cluster.client.fanout import each
from halo_cluster.config import Config, NodeConfig
from halo_cluster.config.section import Section
from halo_cluster.engines import process
from halo_cluster.engines.layout import Layout
from halo_cluster.engines.protocol import Prepared, ServeContext, ServeRequest, Witness
from halo_cluster.engines.start import Ready, StartPlan, launch
from halo_cluster.errors import UsageError
from halo_cluster.witness.nccl_log import parse_logs

SCRIPT = str(Path(__file__).with_name("relay_server.py"))
CONNECTED = re.compile(r"^relay head: connected to (\S+)$", re.M)
ACCEPTED = re.compile(r"^relay worker: accepted (\S+)$", re.M)


@dataclass(frozen=True)
class RelayOptions:
    port: int = 50100
    script: str = SCRIPT
    python: str = "python3"

    @classmethod
    def from_section(cls, section: Section | None) -> RelayOptions:
        if section is None:
            return cls()
        section.only(("port", "script", "python"))
        return cls(
            port=section.number("port", 50100, maximum=65535) or 50100,
            script=section.text("script", SCRIPT),
            python=section.text("python", "python3"),
        )


class Relay:
    name = "relay"
    member = "relay-worker"
    weights_on_head = True
    owned: Mapping[str, str] = MappingProxyType({})  # it sets nothing of its own
    model_format = "hf"  # it serves no model, but a model directory lets tune list it
    layout_examples = ("HOP2",)

    def layouts(self, nodes: int, gpus: int, heads: int | None) -> list[Layout]:
        """The head and nodes - 1 workers: two nodes at least."""
        return [self.layout(f"HOP{nodes}", gpus)] if nodes >= 2 else []

    def layout(self, shape: str, gpus: int) -> Layout:
        found = re.fullmatch(r"HOP(\d+)", shape.strip(), re.IGNORECASE)
        if found is None:
            raise UsageError(f"layout 'relay {shape.strip()}': the relay runs HOPn")
        nodes = int(found[1])
        return Layout("relay", nodes, f"HOP{nodes}", serve=(("nodes", nodes),))

    def options(self, section: Section | None, flags: Mapping[str, Any]) -> RelayOptions:
        if any(value is not None for value in flags.values()):
            raise UsageError("the relay engine takes no --tp or --executor")
        return RelayOptions.from_section(section)

    def check(self, config: Config, request: ServeRequest) -> None:
        if len(config.nodes) < 2 or not all(n.fabric_address for n in config.nodes):
            raise UsageError("the relay engine needs two nodes or more, each with its address")

    def uses_ray(self, options: Any) -> bool:
        return False

    def watches_ray(self, executor: str | None) -> bool:
        return False

    def memory(self, ctx: ServeContext, prepared: Prepared) -> None:
        return None  # a relay holds no model

    def label(self, executor: str | None) -> str:
        return "relay (test engine)"

    def named(self, name: str) -> tuple[str, ...]:
        return ()

    def describe(self, engine: Mapping[str, Any]) -> list[str]:
        return [f"engine: relay, links {', '.join(engine.get('links', []))}"]

    def prepare(self, ctx: ServeContext) -> Prepared:
        options: RelayOptions = ctx.request.options
        script = f"command -v {shlex.quote(options.python)} >/dev/null && test -f {shlex.quote(options.script)}\n"
        members = list(ctx.config.nodes[: ctx.request.nodes or len(ctx.config.nodes)])
        for node, result in zip(
            members, each(members, lambda n: ctx.client(n).script(script, 30)), strict=True
        ):
            if not result.ok:
                raise UsageError(f"{node.name}: no {options.python} or no {options.script} there")
        workers = members[1:]
        return Prepared([ctx.head, *workers], rdma=False, executor="relay", detail=workers)

    def _endpoint(self, ctx: ServeContext, node: NodeConfig) -> str:
        options: RelayOptions = ctx.request.options
        return f"{ctx.plans[node.name].address}:{options.port}"

    def start_plan(self, ctx: ServeContext, prepared: Prepared) -> StartPlan:
        """A worker on every node, each reached from the head, then the head."""
        options: RelayOptions = ctx.request.options
        workers = []
        for node in prepared.detail:
            address = ctx.plans[node.name].address or ""
            argv = [options.python, "-u", options.script, "worker", "--bind", address]
            argv += ["--port", str(options.port)]
            ready = Ready(address, options.port, 30)
            workers.append(launch(node.name, "relay worker", argv, {}, ready=ready))
        serve = ctx.request.serve
        endpoints = ",".join(self._endpoint(ctx, n) for n in prepared.detail)
        argv = [options.python, "-u", options.script, "head", "--host", serve.host]
        argv += ["--port", str(serve.port), "--workers", endpoints, "--model", ctx.request.model]
        head = launch(ctx.head.name, "relay head", argv, {})
        return StartPlan((tuple(workers), (head,)))

    def witness(self, ctx: ServeContext, prepared: Prepared) -> Witness:
        """The relay's own words: the head connected to each worker's fabric endpoint, and
        each worker accepted the head's fabric address."""
        head_log = process.log_text(ctx.client(ctx.head), ctx.config.name)
        links = CONNECTED.findall(head_log)
        problems = []
        head_address = ctx.plans[ctx.head.name].address
        for node in prepared.detail:
            endpoint = self._endpoint(ctx, node)
            if endpoint not in links:
                problems.append(f"{node.name}: the head never connected to {endpoint}")
            accepted = ACCEPTED.findall(process.log_text(ctx.client(node), ctx.config.name))
            if set(accepted) != {head_address}:  # halo's reach probe comes from the head too
                problems.append(f"{node.name}: accepted {accepted}, not the head's {head_address}")
        ranks = [
            {"rank": i, "node": n.name, "address": self._endpoint(ctx, n)}
            for i, n in enumerate(prepared.detail)
        ]
        return Witness(
            expected="socket",
            verdict=parse_logs([]).to_dict(),
            engine={"engine": self.name, "links": links},
            ranks=ranks,
            problems=problems,
            transport="socket",
            summary={"backend": "relay-tcp", "nodes": [m.name for m in prepared.members]},
        )


ENGINE = Relay()
