"""The controller's side of the wire: each node command's argv, as a list (``NodeConfig.command``
puts the interpreter or the installed halo before it). Every value is written as the node
reads it back (``commands.read_value``)."""

from __future__ import annotations

from collections.abc import Sequence

from halo_cluster.wire.commands import (
    BENCH_DRIVER,
    COUNTERS,
    EXPORTER,
    GGUF_LAYERS,
    INVENTORY,
    NET_PROBE,
    NODE_INFO,
    POWER,
    RAY_NODES,
    SERVE_HEALTH,
    SERVE_PROBE,
    SERVE_TOKENS,
    SETUP,
    SUPERVISE,
)


def inventory_args(versions: bool = True, root: str | None = None) -> list[str]:
    return INVENTORY.argv(root=root, json=True, versions=versions)


def counters_args(
    fabric: str | None = None,
    mgmt: str | None = None,
    rdma: tuple[str, int] | None = None,
    root: str | None = None,
    links: Sequence[str] = (),
) -> list[str]:
    """The byte counters of the paths: interfaces by address, the RDMA port (device, port);
    ``links``: a routed fabric's cables by name, added up as the fabric path."""
    return COUNTERS.argv(root=root, fabric=fabric, mgmt=mgmt, rdma=rdma, link=list(links))


def power_args(root: str | None = None) -> list[str]:
    """The node's power readings, read once (``answers.parse_power``)."""
    return POWER.argv(root=root)


def serve_health_args(host: str, port: int) -> list[str]:
    return SERVE_HEALTH.argv(host=host, port=port)


def serve_probe_args(host: str, port: int, tokens: int) -> list[str]:
    return SERVE_PROBE.argv(host=host, port=port, tokens=tokens)


def serve_tokens_args(
    host: str, port: int, prompts: Sequence[str], tokens: int, top: int
) -> list[str]:
    """Greedy answers of ``tokens`` tokens to each prompt, with the ``top`` likeliest
    alternatives at every step."""
    return SERVE_TOKENS.argv(host=host, port=port, tokens=tokens, top=top, prompt=list(prompts))


def gguf_layers_args(path: str) -> list[str]:
    return GGUF_LAYERS.argv(path=path)


def ray_nodes_args(wait: Sequence[str] | None = None, timeout: float | None = None) -> list[str]:
    """Ray's node table; with ``wait``, once these addresses are alive (``timeout`` s)."""
    return RAY_NODES.argv(wait=wait, timeout=timeout)


def net_probe_serve_args(bind: str, port: int, limit: float | None = None) -> list[str]:
    return [NET_PROBE.name, *NET_PROBE.mode("serve").argv(bind=bind, port=port, limit=limit)]


def net_probe_ping_args(
    host: str, port: int, seconds: float | None = None, size: int | None = None
) -> list[str]:
    ping = NET_PROBE.mode("ping")
    return [NET_PROBE.name, *ping.argv(target=(host, port), seconds=seconds, size=size)]


def net_probe_stream_args(
    host: str, port: int, seconds: float | None = None, streams: int | None = None
) -> list[str]:
    stream = NET_PROBE.mode("stream")
    return [NET_PROBE.name, *stream.argv(target=(host, port), seconds=seconds, streams=streams)]


def bench_driver_args() -> list[str]:
    return BENCH_DRIVER.argv()


def setup_args(
    distro: str,
    mtu: int,
    steps: Sequence[str] = (),
    fabric_iface: str | None = None,
    address: str | None = None,
    apply: bool = False,
    root: str | None = None,
    fabric: str | None = None,
    names: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """This node's setup steps (``apply``: applied, the controller having asked first);
    ``fabric``: the node's part of a routed fabric, as JSON; ``names``: every node's name
    and fabric address, for the names step."""
    return SETUP.argv(
        root=root,
        local=True,
        json=True,
        distro=distro,
        mtu=mtu,
        step=steps,
        fabric_iface=fabric_iface,
        address=address,
        fabric=fabric,
        name=[f"{name}={address}" for name, address in names],
        apply=apply,
        yes=apply,
    )


def exporter_args(
    listen: str,
    interval: str | None = None,
    peers: Sequence[tuple[str, str, str]] = (),
    echo: Sequence[str] = (),
    probe: Sequence[str] = (),
    probe_port: int | None = None,
    rescan: str | None = None,
    rdma_probe_every: str | None = None,
    once: bool = False,
    root: str | None = None,
) -> list[str]:
    """The exporter on ``listen`` (ADDR:PORT); ``peers`` as (name, fabric|mgmt, address)."""
    return EXPORTER.argv(
        root=root,
        listen=listen,
        interval=interval,
        peer=peers,
        echo=echo,
        probe=probe,
        probe_port=probe_port,
        rescan=rescan,
        rdma_probe_every=rdma_probe_every,
        once=once,
    )


def node_info_args() -> list[str]:
    return NODE_INFO.argv()


def supervise_args(spec: str) -> list[str]:
    """The supervisor on the head, reading its spec from ``spec`` (a file there)."""
    return SUPERVISE.argv(spec=spec)
