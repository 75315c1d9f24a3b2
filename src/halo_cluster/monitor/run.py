"""Running the exporter: the HTTP server, the sampler, the echo servers and the RDMA prober,
until Ctrl-C; shared by ``halo exporter`` and the node side (the deployed unit)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from halo_cluster.monitor.probes import Target

Say = Callable[[str], None]


@dataclass(frozen=True)
class ExporterSpec:
    root: str
    address: str
    port: int
    targets: Sequence[Target]
    echo_addresses: Sequence[str] = ()
    probe_port: int = 9878
    interval_s: float = 1.0
    rescan_s: float = 10.0
    rdma_every_s: float | None = None
    baseline: dict[tuple[str, str], float] = field(default_factory=dict)
    state_dir: str | None = None  # halo's state directory (the supervisor's state, if any)


def raise_fd_limit(wanted: int = 65536) -> None:
    """Let the soft descriptor limit reach the hard one (as Go programs such as
    node_exporter do by themselves); the exporter sizes its file cache and its connection
    limit from what it gets."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if soft != resource.RLIM_INFINITY and soft < target:
        # a container may refuse: the budgets then follow the limit we have
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def once(spec: ExporterSpec) -> str:
    """One /metrics page (no server)."""
    state = _state(spec, lambda _m: None)
    state.tick()
    text: str = state.metrics()
    return text


def run_exporter(spec: ExporterSpec, say: Say) -> int:
    """Serve /metrics until Ctrl-C. A busy port is one line (UsageError) before anything
    runs; everything started is stopped again on the way out."""
    from halo_cluster.monitor.exporter import serve

    raise_fd_limit()
    state = _state(spec, say)
    server = serve(state, spec.address, spec.port)
    echoes = _echo_servers(spec.echo_addresses, spec.probe_port)
    for echo in echoes:
        echo.start()
    state.start()
    if state.rdma is not None:
        state.rdma.start()
    say(
        f"halo exporter on http://{spec.address}:{spec.port}/metrics, sampling every "
        f"{spec.interval_s:g} s, {len(spec.targets)} probe target(s)"
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        state.stop()
        for echo in echoes:
            echo.shutdown()
            echo.server_close()
    return 0


def _state(spec: ExporterSpec, say: Say) -> Any:
    from halo_cluster.monitor.exporter import Exporter
    from halo_cluster.monitor.sampler import Sampler

    state = Exporter(
        Sampler(spec.root, spec.rescan_s), list(spec.targets), spec.interval_s, spec.baseline
    )
    if spec.rdma_every_s:
        state.rdma = rdma_prober(spec.root, spec.targets, spec.rdma_every_s, say)
    state.state_dir = spec.state_dir
    return state


def _echo_servers(addresses: Sequence[str], port: int) -> list[Any]:
    from halo_cluster.errors import UsageError
    from halo_cluster.monitor.probes import EchoServer

    servers = []
    for address in addresses:
        try:
            servers.append(EchoServer(address, port))
        except OSError as err:
            for server in servers:
                server.server_close()
            raise UsageError(
                f"cannot answer probes on {address}:{port}: {err.strerror or err} "
                "(--probe-port PORT)"
            ) from None
    return servers


def rdma_prober(root: str, targets: Sequence[Target], every_s: float, say: Say) -> Any:
    """The RDMA prober for this node's planned RoCE/IB port; None (with a warning) without one."""
    from halo_cluster.errors import HaloError
    from halo_cluster.facts.inventory import collect_inventory
    from halo_cluster.monitor.rdma_probe import RdmaProber, RdmaTarget
    from halo_cluster.runner.local import LocalRunner
    from halo_cluster.transport import plan_transport
    from halo_cluster.transport.render import perftest_device

    try:
        rdma = perftest_device(plan_transport(collect_inventory(root), "auto"))
    except HaloError as err:
        say(f"halo: warning: no RDMA probe: {err}")
        return None
    if rdma is None:
        say("halo: warning: no RDMA probe: this node has no usable RDMA port")
        return None
    peers = [RdmaTarget(t.peer, t.address) for t in targets if t.path == "fabric"]
    return RdmaProber(LocalRunner(), rdma.device, rdma.gid_index, peers, every_s, ib_port=rdma.port)


def stderr(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
