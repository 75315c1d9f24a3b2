"""``halo bench net``: latency and bandwidth per node pair and path (management Ethernet,
fabric TCP, fabric RDMA), with the peer tools started on both ends over SSH.

Tools: RDMA — perftest ``ib_write_lat`` / ``ib_write_bw`` with each node's own plan (device,
port, GID index); TCP latency — ``sockperf ping-pong``, else ``qperf tcp_lat``; TCP bandwidth —
``iperf3 -J``, else ``qperf tcp_bw``; where none is installed on both ends, halo's built-in
probe (labelled ``builtin`` in every output). Latency is one way, as the tools report it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from halo_cluster.bench import tools
from halo_cluster.bench.net_legs import Leg, legs, link_limits, pct
from halo_cluster.bench.remote import PORT_IN_USE, RemoteJobs
from halo_cluster.client.node import NodeClient
from halo_cluster.config import Config, NodeConfig
from halo_cluster.errors import BenchError, ParseError, UsageError
from halo_cluster.facts.model import Inventory
from halo_cluster.perftest import (
    Bandwidth,
    Latency,
    parse_perftest_bw,
    parse_perftest_json,
    parse_perftest_lat,
    perftest_argv,
)
from halo_cluster.runner.result import TIMED_OUT
from halo_cluster.schema import SCHEMAS
from halo_cluster.transport import TransportPlan
from halo_cluster.transport.render import PerftestDevice, perftest_device
from halo_cluster.wire.args import (
    net_probe_ping_args,
    net_probe_serve_args,
    net_probe_stream_args,
)

SCHEMA = SCHEMAS["net"]
# link: each cable of a routed fabric on its own (fabric then runs between identities)
PATHS = ("mgmt", "fabric", "link", "rdma")
PEER_TOOLS = ("sockperf", "qperf", "iperf3", "ib_write_lat", "ib_write_bw")
RDMA_LAT_SIZE = 2
RDMA_BW_SIZE = 65536
RDMA_LAT_ITERS = 10000
RDMA_BW_ITERS = 5000
PORT_ATTEMPTS = 5
# After a tool failed: a short ping-pong over the path, and how long it may take.
PATH_PROBE, PATH_PROBE_S = "path-probe", 15.0
PERFTEST_JSON = "perftest-json"
PERFTEST_JSON_SCRIPT = (
    'report=$1; shift; "$@" --out_json --out_json_file="$report" >/dev/null || exit $?; '
    'cat "$report"; rm -f "$report"'
)


class NetBench:
    def __init__(
        self,
        config: Config,
        clients: Mapping[str, NodeClient],
        plans: Mapping[str, TransportPlan],
        inventories: Mapping[str, Inventory | None],
        *,
        seconds: float = 5.0,
        latency_tool: str = "auto",
        bandwidth_tool: str = "auto",
        streams: int = 4,
        port: int = 18600,
        bandwidth: bool = True,
        progress: Callable[[str], None] | None = None,
        jobs: RemoteJobs | None = None,
    ) -> None:
        self.config = config
        self.clients = clients
        self.plans = plans
        self.inventories = inventories
        self.seconds = seconds
        self.latency_tool = latency_tool
        self.bandwidth_tool = bandwidth_tool
        self.streams = streams
        self.port = port
        self.bandwidth = bandwidth
        self.progress = progress or (lambda _m: None)
        self.jobs = jobs or RemoteJobs(clients)
        self._tools: dict[str, set[str]] = {}
        self._ports = iter(range(port, port + 1000))
        self.result: dict[str, Any] = {}

    # -- what each node has -----------------------------------------------------------------
    def tools_on(self, node: NodeConfig) -> set[str]:
        if node.name not in self._tools:
            script = (
                "".join(f"command -v {t} >/dev/null 2>&1 && echo {t}\n" for t in PEER_TOOLS)
                # perftest >= 4.5 writes its report as JSON too
                + "ib_write_lat --help 2>&1 | grep -q -- --out_json && echo perftest-json\n"
                + "exit 0\n"
            )
            result = self.clients[node.name].script(script, timeout=30)
            if not result.ok:
                raise BenchError(f"{node.name} does not answer: {result.error_text()}")
            self._tools[node.name] = set(result.stdout.split())
        return self._tools[node.name]

    def _choose(self, leg: Leg, wanted: str, order: Sequence[str]) -> str:
        both = self.tools_on(leg.node) & self.tools_on(leg.peer)
        if wanted == "builtin":
            return "builtin"
        if wanted != "auto":
            if wanted not in both:
                where = leg.node.name if wanted not in self.tools_on(leg.node) else leg.peer.name
                raise UsageError(f"{wanted} is not installed on {where}; install it or use auto")
            return wanted
        return next((t for t in order if t in both), "builtin")

    # -- measuring --------------------------------------------------------------------------
    def run(
        self, pairs: Sequence[tuple[NodeConfig, NodeConfig]], paths: Sequence[str]
    ) -> dict[str, Any]:
        """Measure every leg; a leg that fails is recorded with its error and the run goes
        on, except when a node or path stops answering (BenchError). Whatever happens, the
        remote tools are stopped and what was measured stays in ``self.result``."""
        measured: list[dict[str, Any]] = []
        skipped_all: list[dict[str, str]] = []
        self.result = result = {
            "schema": SCHEMA,
            "kind": "net",
            "paths": measured,
            "skipped": skipped_all,
        }
        try:
            fabric = self.config.mesh()
            for a, b in pairs:
                chosen, skipped = legs(a, b, [p for p in paths if p != "rdma"], fabric)
                skipped_all += skipped
                if "rdma" in paths:
                    rdma, why = self._rdma_leg(a, b)
                    if rdma is None:
                        skipped_all.append(
                            {"pair": f"{a.name},{b.name}", "path": "rdma", "reason": why}
                        )
                    else:
                        chosen.append(rdma)
                for leg in chosen:
                    self.measure(leg, measured)
        finally:
            self.jobs.cleanup()
        return result

    def _rdma_leg(self, a: NodeConfig, b: NodeConfig) -> tuple[Leg | None, str]:
        for node in (a, b):
            plan = self.plans.get(node.name)
            if plan is None or perftest_device(plan) is None:
                transport = plan.transport if plan else "unknown"
                return None, f"{node.name}'s plan is {transport}, not RDMA"
        if not (a.fabric_address and b.fabric_address):
            return None, "no fabric_address"
        return Leg(a, b, "rdma", a.fabric_address, b.fabric_address), ""

    def measure(self, leg: Leg, sink: list[dict[str, Any]]) -> dict[str, Any]:
        """Measure one leg into a new entry of ``sink`` (kept there, with the error, when
        the run ends in this leg)."""
        entry = self._entry(leg)
        sink.append(entry)
        try:
            self._measure(leg, entry)
        except BenchError as err:
            entry["errors"].append(str(err))
            raise
        return entry

    def _entry(self, leg: Leg) -> dict[str, Any]:
        return {
            "node": leg.node.name,
            "peer": leg.peer.name,
            "path": leg.path,
            "transport": "rdma" if leg.path == "rdma" else "tcp",
            "from": leg.source,
            "to": leg.target,
            "latency_us": None,
            "bandwidth_gbps": None,
            "errors": [],
            **({"hops": leg.hops} if leg.hops is not None else {}),
            **({"cable": leg.cable} if leg.cable is not None else {}),
        }

    def _measure(self, leg: Leg, entry: dict[str, Any]) -> None:
        label = f"{leg.node.name} → {leg.peer.name} {leg.cable or leg.path}"
        self.progress(f"{label}: latency")
        try:
            latency = self._latency(leg)
            entry["latency_us"] = {
                "p50": round(latency.typical_us, 3),
                "p99": round(latency.p99_us, 3) if latency.p99_us is not None else None,
                "avg": round(latency.avg_us, 3) if latency.avg_us is not None else None,
                "samples": latency.samples,
                "tool": latency.tool,
            }
        except ParseError as err:
            self._still_answers(leg, "latency", err)
            entry["errors"].append(f"latency: {err}")
        if self.bandwidth:
            self.progress(f"{label}: bandwidth")
            try:
                bandwidth = self._bandwidth(leg)
                entry["bandwidth_gbps"] = round(bandwidth.gbps, 3)
                entry["bandwidth_tool"] = bandwidth.tool
                entry["retransmits"] = bandwidth.retransmits
            except ParseError as err:
                self._still_answers(leg, "bandwidth", err)
                entry["errors"].append(f"bandwidth: {err}")
        line, ceiling = link_limits(self.inventories.get(leg.node.name), leg.source)
        entry["line_rate_gbps"] = line
        entry["pcie_ceiling_gbps"] = round(ceiling, 1) if ceiling else None
        entry["pct_line_rate"] = pct(entry["bandwidth_gbps"], line)
        entry["pct_pcie"] = pct(entry["bandwidth_gbps"], ceiling)

    def _pair_run(
        self,
        leg: Leg,
        role: str,
        commands: Callable[[int], tuple[list[str], list[str]]],
        limit: float | None = None,
    ) -> str:
        """Start the server on the peer, run the client on the node, stop the server; the
        client's output. ``commands(port)`` gives (server, client); a port already in use on
        the peer moves to the next one. A node or path that stops answering ends the run."""
        limit = self._limit() if limit is None else limit
        for _attempt in range(PORT_ATTEMPTS):
            port = next(self._ports)
            server, client = commands(port)
            started = self.jobs.start(leg.peer, f"{role}-server", server, limit + 10, port)
            if started.returncode != PORT_IN_USE:
                break
        if not started.ok:
            self._check_alive(leg.peer)
            raise ParseError(f"{server[0]} server on {leg.peer.name}: {started.error_text()}")
        done = self.jobs.run(leg.node, f"{role}-client", client, limit)
        self.jobs.stop(leg.peer, f"{role}-server")  # frees its port before the next leg
        if not done.ok:
            self._check_alive(leg.node, leg.peer)
            # A tool that failed fast (refused, unreachable) on a path that was cut says so
            # in its own words: whether the path still answers is asked again, directly.
            if done.returncode == TIMED_OUT:
                raise self._stopped(leg, "the tool timed out")
            raise ParseError(f"{client[0]} on {leg.node.name}: {done.error_text()}")
        return done.stdout

    def _still_answers(self, leg: Leg, what: str, err: ParseError) -> None:
        """After a tool failed fast, or said in its own output that it failed (iperf3's
        JSON 'error' can come with exit 0): a path that was cut is named as such, asked
        directly with a probe; a path that answers leaves the failure to the tool's words."""
        if not self._path_answers(leg):
            said = err.reason if len(err.reason) <= 160 else err.reason[:157] + "..."
            raise self._stopped(leg, f"{what} failed ({said}) and a probe got no answer")

    def _path_answers(self, leg: Leg) -> bool:
        """Whether ``leg``'s path carries a short TCP ping-pong now (the built-in probe)."""
        peer, node = self.clients[leg.peer.name], self.clients[leg.node.name]

        def commands(port: int) -> tuple[list[str], list[str]]:
            server = peer.command(*net_probe_serve_args(leg.target, port, PATH_PROBE_S + 10))
            return server, node.command(*net_probe_ping_args(leg.target, port, 0.2))

        try:
            self._pair_run(leg, PATH_PROBE, commands, limit=PATH_PROBE_S)
        except (ParseError, BenchError):
            return False
        return True

    def _check_alive(self, *nodes: NodeConfig) -> None:
        for node in nodes:
            answer = self.clients[node.name].run(["true"], timeout=10)
            if not answer.ok:
                raise BenchError(f"lost {node.name}: it does not answer ({answer.error_text()})")

    @staticmethod
    def _stopped(leg: Leg, why: str) -> BenchError:
        return BenchError(
            f"{leg.path} path {leg.source} → {leg.target} ({leg.node.name} → "
            f"{leg.peer.name}) stopped answering: {why}"
        )

    def _latency(self, leg: Leg) -> Latency:
        if leg.path == "rdma":
            latency: Latency = self._perftest(leg, "ib_write_lat")
            return latency
        tool = self._choose(leg, self.latency_tool, ("sockperf", "qperf"))
        return LATENCY_PARSERS[tool](self._tcp_run(leg, "lat", tool))

    def _bandwidth(self, leg: Leg) -> Bandwidth:
        if leg.path == "rdma":
            bandwidth: Bandwidth = self._perftest(leg, "ib_write_bw")
            return bandwidth
        tool = self._choose(leg, self.bandwidth_tool, ("iperf3", "qperf"))
        return BANDWIDTH_PARSERS[tool](self._tcp_run(leg, "bw", tool))

    def _tcp_run(self, leg: Leg, kind: str, tool: str) -> str:
        """Run ``tool`` measuring ``kind`` (lat / bw) over TCP on ``leg``; its output."""
        target, seconds = leg.target, self.seconds

        def commands(port: int) -> tuple[list[str], list[str]]:
            if tool == "sockperf":
                server = tools.sockperf_server_argv(target, port)
                return server, tools.sockperf_client_argv(target, port, seconds)
            if tool == "iperf3":
                server = tools.iperf3_server_argv(target, port)
                return server, tools.iperf3_client_argv(target, port, seconds, self.streams)
            if tool == "qperf":
                test = "tcp_lat" if kind == "lat" else "tcp_bw"
                return ["qperf", "--listen_port", str(port)], tools.qperf_argv(
                    target, port, seconds, test
                )
            peer, node = self.clients[leg.peer.name], self.clients[leg.node.name]
            server = peer.command(*net_probe_serve_args(target, port, self._limit() + 5))
            if kind == "lat":
                return server, node.command(*net_probe_ping_args(target, port, seconds))
            return server, node.command(*net_probe_stream_args(target, port, seconds, self.streams))

        return self._pair_run(leg, kind, commands)

    def _limit(self) -> float:
        """Seconds a client may take before its path counts as gone."""
        return self.seconds * 3 + 15

    def _perftest(self, leg: Leg, tool: str) -> Any:  # Latency or Bandwidth
        missing = [n.name for n in (leg.node, leg.peer) if tool not in self.tools_on(n)]
        if missing:
            raise ParseError(f"{tool} (perftest) is not installed on {', '.join(missing)}")
        local = perftest_device(self.plans[leg.node.name])
        remote = perftest_device(self.plans[leg.peer.name])
        assert local is not None and remote is not None  # _rdma_leg made the leg
        latency = tool.endswith("_lat")
        size = RDMA_LAT_SIZE if latency else RDMA_BW_SIZE
        iterations = RDMA_LAT_ITERS if latency else RDMA_BW_ITERS
        as_json = PERFTEST_JSON in self.tools_on(leg.node)

        def commands(port: int) -> tuple[list[str], list[str]]:
            def argv(rdma: PerftestDevice, server: str | None) -> list[str]:
                return perftest_argv(
                    tool,
                    rdma.device,
                    rdma.gid_index,
                    server,
                    ib_port=rdma.port,
                    size=size,
                    iterations=iterations,
                    port=port,
                )

            client = argv(local, leg.target)
            if as_json:
                # a fixed script; the report path and perftest's argv are its arguments
                report = f"/tmp/halo-perftest-{self.jobs.run_id}-{port}.json"
                client = ["sh", "-c", PERFTEST_JSON_SCRIPT, "sh", report, *client]
            return argv(remote, None), client

        out = self._pair_run(leg, tool, commands)
        if as_json:
            parsed = parse_perftest_json(out)
            if isinstance(parsed, Latency) != latency:
                raise ParseError(f"{tool} wrote a report of the other kind", out[-400:])
            return parsed
        return parse_perftest_lat(out) if latency else parse_perftest_bw(out)


LATENCY_PARSERS: dict[str, Callable[[str], Latency]] = {
    "sockperf": tools.parse_sockperf,
    "qperf": tools.qperf_latency,
    "builtin": tools.parse_builtin_latency,
}
BANDWIDTH_PARSERS: dict[str, Callable[[str], Bandwidth]] = {
    "iperf3": tools.parse_iperf3,
    "qperf": tools.qperf_bandwidth,
    "builtin": tools.parse_builtin_bandwidth,
}
