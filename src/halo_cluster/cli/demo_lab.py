"""The lab part of ``halo demo`` (root only): a 2-node lab, the doctor over SSH, exporters
inside the nodes with real traffic on the fabric, one ``halo top --once`` frame, then down."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from halo_cluster.lab.lab import Lab
    from halo_cluster.lab.state import LabState

HALO = str(Path(sys.executable).parent / "halo")


def lab_demo(out: Console | None) -> dict[str, Any]:
    from halo_cluster.errors import HaloError
    from halo_cluster.lab.lab import Lab

    if out is not None:
        out.rule(
            "[bold]8. A 2-node lab on this machine: doctor over SSH, exporters, traffic, halo top"
        )
    if os.geteuid() != 0:
        message = (
            "not root: the lab needs network namespaces. As root, the demo starts two nodes "
            "(own network, PID, mount and UTS namespaces, sshd), runs the doctor over SSH, "
            "runs exporters with traffic on the fabric, shows a halo top frame and removes the lab."
        )
        if out is not None:
            out.print(message)
        return {"skipped": message}
    lab = Lab()
    with tempfile.TemporaryDirectory(prefix="halo-demo-") as tmp:
        try:
            state = lab.up("demo", Path(tmp) / "lab", 2, 9000, HALO)
        except HaloError as err:
            if out is not None:
                out.print(f"[yellow]lab not started:[/] {err}")
            return {"skipped": str(err)}
        procs: list[subprocess.Popen[bytes]] = []
        try:
            return {
                "nodes": [n.name for n in state.nodes],
                "doctor": _doctor(state, out),
                "top": _monitor(lab, state, procs, out),
            }
        finally:
            lab.down(state)
            for proc in procs:
                proc.wait(timeout=10)
            if out is not None:
                out.print("lab removed")


def _doctor(state: LabState, out: Console | None) -> dict[str, Any]:
    from halo_cluster.cli.doctor import render_report
    from halo_cluster.cluster.doctor import doctor_cluster
    from halo_cluster.cluster.gather import ssh_runners
    from halo_cluster.config import load_config

    config = load_config(Path(state.dir) / "halo.toml")
    report = doctor_cluster(config, ssh_runners(config))
    if out is not None:
        shown = [f"{n.name} {n.mgmt_address} / fabric {n.fabric_address}" for n in state.nodes]
        out.print(f"nodes: {', '.join(shown)}")
        render_report(out, report)
    return report.to_dict()


def _monitor(
    lab: Lab, state: LabState, procs: list[subprocess.Popen[bytes]], out: Console | None
) -> dict[str, Any]:
    from halo_cluster.cli.monitor import scrape
    from halo_cluster.monitor.frame import build_frame, render_frame

    config = str(Path(state.dir) / "halo.toml")
    targets = [f"{n.mgmt_address}:9877" for n in state.nodes]
    for node in state.nodes:
        argv = [
            HALO,
            "exporter",
            "--config",
            config,
            "--node",
            node.name,
            "--listen",
            f"{node.mgmt_address}:9877",
            "--interval",
            "250ms",
        ]
        procs.append(
            subprocess.Popen(
                lab.exec_argv(node, argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
    deadline = time.monotonic() + 20
    while any(isinstance(scrape(t), str) for t in targets) and time.monotonic() < deadline:
        time.sleep(0.1)
    node1, node2 = state.nodes[0], state.nodes[1]
    if shutil.which("iperf3"):
        procs.append(
            subprocess.Popen(
                lab.exec_argv(node2, ["iperf3", "-s", "-1", "-B", node2.fabric_address]),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        time.sleep(0.3)
        procs.append(
            subprocess.Popen(
                lab.exec_argv(node1, ["iperf3", "-c", node2.fabric_address, "-t", "3"]),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        time.sleep(1.0)
    first = {t: scrape(t) for t in targets}
    time.sleep(1.0)
    frame = build_frame(first, {t: scrape(t) for t in targets}, 1.0)
    if out is not None:
        traffic = (
            "iperf3 node1 -> node2 on the fabric"
            if shutil.which("iperf3")
            else "no iperf3: idle links"
        )
        out.print(f"halo top --once ({traffic}):")
        out.print(render_frame(frame), markup=False, highlight=False)
    return frame
