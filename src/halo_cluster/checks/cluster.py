"""Cluster checks: pure functions over every node's report."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from halo_cluster import __version__
from halo_cluster.checks import Finding, fail, info, ok, warn
from halo_cluster.checks.context import NodeReport
from halo_cluster.checks.fabric import fabric_checks
from halo_cluster.checks.fixes import q
from halo_cluster.checks.memory_owners import LARGE_SHARE, how_to_stop, owner_line
from halo_cluster.checks.node_code import check_halo_versions
from halo_cluster.errors import HaloError
from halo_cluster.facts.model import Inventory, NetInterface
from halo_cluster.mesh import Fabric
from halo_cluster.transport import plan_transport
from halo_cluster.transport.render import rail_label

MUST_MATCH = ("python", "ray", "vllm", "torch")


def _reached(reports: Sequence[NodeReport]) -> list[tuple[NodeReport, Inventory]]:
    return [(r, r.inventory) for r in reports if r.inventory is not None]


def _fabric_iface(report: NodeReport, inv: Inventory) -> NetInterface | None:
    return inv.interface_with_address(report.node.fabric_address)


def check_reachable(reports: Sequence[NodeReport]) -> list[Finding]:
    down = [r for r in reports if r.inventory is None and r.python is None]
    if not down:
        return [ok("cluster.reachable", f"all {len(reports)} nodes answered over SSH")]
    return [
        fail(
            "cluster.reachable",
            f"{r.node.name} did not answer",
            r.error or "",
            fix=[
                f"ssh -o BatchMode=yes -- {q(r.node.ssh)} true   # test by hand",
                f"# does {r.node.runs} run there (through its exec_prefix)?",
            ],
        )
        for r in down
    ]


def check_fabric_ping(reports: Sequence[NodeReport]) -> Finding:
    failed = [
        f"{r.node.name} -> {peer}"
        for r, _ in _reached(reports)
        for peer, good in r.pings.items()
        if not good
    ]
    tried = sum(len(r.pings) for r, _ in _reached(reports))
    if failed:
        return fail(
            "cluster.fabric_ping",
            f"{len(failed)} of {tried} fabric paths fail",
            *failed,
            fix=["# check cables, addresses (same subnet) and firewalls on the fabric interfaces"],
        )
    if not tried:
        return info(
            "cluster.fabric_ping", "no fabric addresses to ping (set fabric_address per node)"
        )
    return ok("cluster.fabric_ping", f"all {tried} fabric paths answer ping")


def check_names(reports: Sequence[NodeReport]) -> Finding:
    """Every node resolves every other node's name to its fabric address: an engine's
    bootstrap that looks a peer up by name then reaches it over the fabric, and does not
    hang on a name it cannot resolve."""
    fabric = {r.node.name: r.node.fabric_address for r in reports}
    asked = [(r.node.name, peer, found) for r, _ in _reached(reports)
             for peer, found in r.names.items()]  # fmt: skip
    if not asked:
        return info("cluster.names", "no names asked (no fabric addresses to resolve to)")
    wrong = [
        f"{node}: {peer} -> {found or 'not resolved'} (fabric {fabric.get(peer)})"
        for node, peer, found in asked
        if found != fabric.get(peer)
    ]
    if wrong:
        return warn(
            "cluster.names",
            f"{len(wrong)} of {len(asked)} node names do not resolve to the fabric address",
            *wrong,
            fix=["halo setup --step names --apply   # /etc/hosts: the cluster's names, fabric"],
        )
    return ok("cluster.names", f"all {len(asked)} node names resolve to their fabric address")


def check_container_hca(reports: Sequence[NodeReport], wanted: str) -> list[Finding]:
    """On a node whose commands run in a container (``exec_prefix``), the HCA as the engine
    will see it, against the host's: RDMA devices the host has and the container does not
    see (RCCL/NCCL then print 'NET/IB : No device found' and run over TCP), uverbs nodes
    not passed in, no rdma-core: a fail that blocks the serve, unless the configured
    transport is a TCP network (ethernet, thunderbolt: said, not blocking). An rdma-core
    older than the host's is a warning."""
    found = []
    for report, inv in _reached(reports):
        host = report.host_hca
        if host is None or not host.devices:
            continue  # no container, or a host without RDMA: nothing to hide
        seen = {d.name for d in inv.rdma}
        hidden = [d for d in host.devices if d not in seen]
        uverbs = [p for p in inv.devices.infiniband if "uverbs" in p]
        release = inv.rdma_core.release
        problems = []
        if hidden:
            problems.append(f"the host has {', '.join(hidden)}; the container sees "
                            + (", ".join(sorted(seen)) or "no RDMA device"))  # fmt: skip
        if host.uverbs and not uverbs:
            problems.append(f"no /dev/infiniband/uverbs* in the container ({len(host.uverbs)} "
                            "on the host)")  # fmt: skip
        if release is None:
            problems.append("no rdma-core (libibverbs) in the container")
        older = host.release is not None and release is not None and release < host.release
        if not problems and not older:
            continue
        name = report.node.name
        if not problems:  # only older: userspace older than the host's usually works
            found.append(
                warn(
                    "cluster.container_hca",
                    f"{name}: the container's rdma-core v{release} is older than the host's "
                    f"v{host.release}",
                    fix=[f"# an image with rdma-core >= v{host.release} (its verbs providers)"],
                )
            )
            continue
        # blocking where RDMA is wanted or may be chosen; said only on a chosen TCP network
        severity = info if wanted in ("ethernet", "thunderbolt") else fail
        found.append(
            severity(
                "cluster.container_hca",
                f"{name}: the engine's container hides the host's RDMA: NCCL/RCCL there "
                "would run over TCP",
                *problems,
                fix=[
                    "halo container --image IMAGE   # on the node: the command that passes "
                    "the devices, host network and unlimited memlock",
                    f"# with rdma-core >= v{host.release} in the image"
                    if host.release is not None
                    else "# with rdma-core in the image",
                ],
            )
        )
    return found


def check_memory_owners(reports: Sequence[NodeReport]) -> list[Finding]:
    """A process halo did not start that holds a quarter or more of a node's memory (a
    forgotten server, a second engine): named with how to stop it, before the next start
    fails far into its load. Ray's processes are left out: they may be halo's own Ray's."""
    found = []
    for report in reports:
        memory = report.host_memory
        if memory is None or not memory.total_kib:
            continue
        held = memory.large(LARGE_SHARE, ray=False)
        if held:
            found.append(
                warn(
                    "cluster.memory_owners",
                    f"{report.node.name}: {len(held)} process(es) halo did not start hold a "
                    "quarter or more of its memory",
                    *(owner_line(o, memory.total_kib) for o in held),
                    fix=[f"# {how_to_stop(o)}" for o in held],
                )
            )
    return found


def check_same_subnet(reports: Sequence[NodeReport]) -> Finding:
    networks: dict[str, str] = {}
    for report, inv in _reached(reports):
        iface = _fabric_iface(report, inv)
        cidr = (
            next((c for c in iface.ipv4 if c.split("/")[0] == report.node.fabric_address), None)
            if iface
            else None
        )
        networks[report.node.name] = (
            str(ipaddress.IPv4Interface(cidr).network) if cidr else "no such address"
        )
    evidence = [f"{name}: {net}" for name, net in networks.items()]
    if len(set(networks.values())) == 1 and "no such address" not in networks.values():
        return ok(
            "cluster.same_subnet",
            f"all fabric addresses in {next(iter(networks.values()))}",
            *evidence,
        )
    return fail(
        "cluster.same_subnet",
        "fabric addresses are not on one subnet",
        *evidence,
        fix=["# give every node an address in the same subnet, e.g. 192.168.100.1/30 and .2/30"],
    )


def check_mtu_match(reports: Sequence[NodeReport]) -> Finding:
    mtus = {}
    for report, inv in _reached(reports):
        iface = _fabric_iface(report, inv)
        mtus[report.node.name] = iface.mtu if iface else None
    evidence = [f"{name}: {mtu}" for name, mtu in mtus.items()]
    if len(set(mtus.values())) <= 1:
        return ok(
            "cluster.mtu_match",
            f"fabric MTU {next(iter(mtus.values()), None)} everywhere",
            *evidence,
        )
    return fail(
        "cluster.mtu_match",
        "fabric MTUs differ: large frames are dropped one way",
        *evidence,
        fix=["# set the same MTU (9000) on every fabric interface"],
    )


def check_transport_match(
    reports: Sequence[NodeReport], wanted: str, fabric: Fabric | None = None
) -> Finding:
    """Every node resolves its own transport on its own hardware, towards a peer (on a
    routed fabric: over its cables)."""
    results: dict[str, str] = {}
    for report, inv in _reached(reports):
        peer = next(
            (r.node.fabric_address for r in reports if r is not report and r.node.fabric_address),
            None,
        )
        part = fabric.nodes.get(report.node.name) if fabric is not None else None
        try:
            plan = plan_transport(inv, wanted, peer, part)
            results[report.node.name] = f"{plan.transport} ({rail_label(plan)})"
        except HaloError as err:
            results[report.node.name] = f"error: {err}"
    kinds = {value.split(" ")[0] for value in results.values()}
    evidence = [f"{name}: {value}" for name, value in results.items()]
    if len(kinds) == 1 and "error:" not in kinds:
        return ok("cluster.transport_match", f"every node resolves {kinds.pop()}", *evidence)
    return fail(
        "cluster.transport_match",
        "nodes resolve different transports (or none)",
        *evidence,
        fix=["halo env --explain   # on each node, to see why"],
    )


def check_versions(reports: Sequence[NodeReport]) -> list[Finding]:
    def value(inv: Inventory, key: str) -> str | None:
        if key == "python":
            found = inv.versions.get("python")
            return ".".join(found.split(".")[:2]) if found else None
        if key == "rdma-core":
            return str(inv.rdma_core.release) if inv.rdma_core.release else None
        if key == "kernel":
            return inv.kernel.release
        return inv.versions.get(key)

    findings = []
    reached = _reached(reports)
    for keys, severity in ((MUST_MATCH, "fail"), (("rdma-core", "kernel"), "warn")):
        differ = []
        for key in keys:
            seen = {r.node.name: value(inv, key) for r, inv in reached}
            if len(set(seen.values())) > 1:
                differ.append(f"{key}: " + ", ".join(f"{n}={v}" for n, v in seen.items()))
        if differ:
            maker = fail if severity == "fail" else warn
            what = "must match" if severity == "fail" else "should match"
            findings.append(
                maker(
                    "cluster.versions_match",
                    f"versions that {what} differ",
                    *differ,
                    fix=["# install the same versions on every node (same container image)"],
                )
            )
    return findings or [
        ok("cluster.versions_match", "Python, Ray, vLLM, torch, rdma-core and kernel match")
    ]


def check_ssh_path(reports: Sequence[NodeReport]) -> Finding:
    fabric = {r.node.fabric_address for r in reports if r.node.fabric_address}
    over = [r.node.name for r in reports if r.node.host in fabric]
    if over:
        return info(
            "cluster.ssh_path",
            f"SSH to {', '.join(over)} runs over the fabric: a broken fabric "
            "link also blocks diagnosis; prefer the management network",
        )
    return ok("cluster.ssh_path", "SSH uses a separate network from the fabric")


def cluster_checks(
    reports: Sequence[NodeReport], wanted: str, fabric: Fabric | None = None
) -> list[Finding]:
    """``fabric``: the routed fabric of nodes cabled point to point (None: one switch), whose
    checks take the place of the one subnet's."""
    findings = check_reachable(reports)
    if len(_reached(reports)) >= 2:
        if fabric is not None:
            findings += fabric_checks(reports, fabric)
        else:
            findings += [
                check_fabric_ping(reports),
                check_same_subnet(reports),
                check_mtu_match(reports),
            ]
        findings += [check_names(reports)]
        findings += [check_transport_match(reports, wanted, fabric), *check_versions(reports)]
    findings += check_container_hca(reports, wanted)
    findings += check_memory_owners(reports)
    findings += check_halo_versions(reports, __version__)
    findings.append(check_ssh_path(reports))
    return findings
