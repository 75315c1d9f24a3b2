"""The switchless part of ``halo demo`` (root only): three lab nodes cabled as a full mesh of
point-to-point links (as USB4 boxes are), set up by ``halo setup --apply`` (cable
addresses, identities, routes), checked by the doctor, and llama.cpp served over the
identities with both witnesses; then down."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halo_cluster.cli.demo_lab import HALO
from halo_cluster.jsonout import JsonObject
from halo_cluster.runner.local import LocalRunner

if TYPE_CHECKING:
    from rich.console import Console

STEPS = ("fabric_links", "fabric_identity", "fabric_routes", "fabric_forwarding")


def lab_section(
    out: Console | None, title: str
) -> tuple[Callable[[str], None], dict[str, Any] | None]:
    """A demo section on its own lab: its title ruled, where its lines go, and why it is
    skipped (None: it runs; a lab needs root for its namespaces)."""

    def say(message: str) -> None:
        if out is not None:
            out.print(message)

    if out is not None:
        out.rule(f"[bold]{title}")
    if os.geteuid() != 0:
        say("not root: the lab needs network namespaces (skipped)")
        return say, {"skipped": "not root"}
    return say, None


def mesh_demo(out: Console | None) -> JsonObject:
    from halo_cluster.config import default_llama_cpp
    from halo_cluster.errors import HaloError
    from halo_cluster.lab.lab import Lab

    say, skipped = lab_section(
        out,
        "9. Without a switch: 3 nodes cabled as a USB4 mesh (halo lab up --topology mesh, "
        "halo setup --apply, halo doctor, llama.cpp RPC over the identities)",
    )
    if skipped is not None:
        return skipped
    lab = Lab()
    with tempfile.TemporaryDirectory(prefix="halo-demo-mesh-") as tmp:
        try:
            state = lab.up(
                "dmesh", Path(tmp) / "lab", 3, 9000, None, None, default_llama_cpp(),
                topology="mesh",
            )  # fmt: skip
        except HaloError as err:
            say(f"[yellow]mesh lab not started:[/] {err}")
            return {"skipped": str(err)}
        try:
            return _run(Path(state.dir) / "halo.toml", state.llama_cpp is not None, say)
        finally:
            lab.down(state)
            say("mesh lab removed")


def _halo(*args: str, timeout: float = 300) -> tuple[int, str, str]:
    done = LocalRunner().run([HALO, *args], timeout=timeout)
    return done.returncode, done.stdout, done.stderr


def _run(config: Path, llama: bool, say: Callable[[str], None]) -> JsonObject:
    from halo_cluster.client.node import ssh_clients
    from halo_cluster.cluster.doctor import doctor_cluster
    from halo_cluster.config import load_config

    loaded = load_config(config)
    fabric = loaded.mesh()
    assert fabric is not None
    for cable in fabric.cables:
        say(f"cable {cable.label}: {cable.network}")
    nodes = [a for n in loaded.nodes for a in ("--node", n.name)]
    steps = [a for s in STEPS for a in ("--step", s)]
    code, stdout, stderr = _halo("setup", "--config", str(config), *nodes, *steps, "--apply",
                                 "--yes", "--json")  # fmt: skip
    if code != 0:
        say(f"[red]halo setup failed:[/] {stderr.strip()[-300:]}")
        return {"setup": {"error": stderr.strip()[-300:]}}
    applied = {name: node["applied"] for name, node in json.loads(stdout)["nodes"].items()}
    for name, steps_done in applied.items():
        part = fabric.node(name)
        say(
            f"halo setup --apply on {name}: {', '.join(steps_done) or 'nothing to do'} "
            f"(identity {part.identity} on {part.identity_iface}, {len(part.routes)} routes)"
        )
    report = doctor_cluster(loaded, ssh_clients(loaded))
    for finding in report.cluster:
        if finding.check.startswith("fabric."):
            say(f"  {finding.severity.upper():4} {finding.check}: {finding.summary}")
    for peer, how in fabric.reach("node1").items():
        say(f"node1 reaches {peer} ({how['identity']}) over {how['ifname']}, {how['hops']} hop")
    result: JsonObject = {"applied": applied, "doctor": report.to_dict()}
    if llama:
        result["serve"] = _serve(config, say)
    return result


def _serve(config: Path, say: Callable[[str], None]) -> JsonObject:
    model = config.parent / "gguf"
    code, _, stderr = _halo("lab", "model", str(model), "--format", "gguf")
    if code != 0:
        return {"error": stderr.strip()[-300:]}
    code, stdout, stderr = _halo("serve", str(model / "model.gguf"), "--engine", "llama.cpp",
                                 "--config", str(config), "--json", timeout=600)  # fmt: skip
    if code != 0:
        say(f"[red]halo serve failed:[/] {stderr.strip()[-300:]}")
        return {"error": stderr.strip()[-300:]}
    served = json.loads(stdout)
    workers = ", ".join(w["endpoint"] for w in served["engine"]["rpc"]["workers"])
    say(f"halo serve --engine llama.cpp: RPC workers at {workers}; proven {served['proven']}")
    for node, paths in served["traffic"]["nodes"].items():
        fabric, mgmt = paths["fabric"], paths["mgmt"]
        say(
            f"  {node}: {fabric['name']} {fabric['bytes_per_token'] or 0:,.0f} B/token, "
            f"management {mgmt['bytes_per_token'] or 0:,.0f} B/token"
        )
    _halo("stop", "--config", str(config))
    return {"proven": served["proven"], "problems": served["problems"]}
