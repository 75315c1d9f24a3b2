"""The lab part of ``halo demo`` (root only): a 2-node lab, the doctor over SSH, exporters
inside the nodes with real traffic on the fabric, one ``halo top --once`` frame, then down."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halo_cluster.jsonout import JsonObject
from halo_cluster.runner.local import LocalRunner

if TYPE_CHECKING:
    from rich.console import Console

    from halo_cluster.bench.serve_load import LoadRun
    from halo_cluster.lab.lab import Lab
    from halo_cluster.lab.state import LabState
    from halo_cluster.recipes.run import RunResult
    from halo_cluster.recipes.tune import Tuned
    from halo_cluster.serving.result import ServeResult

HALO = str(Path(sys.executable).parent / "halo")


def lab_demo(out: Console | None) -> JsonObject:
    from halo_cluster.config import default_engine, default_llama_cpp
    from halo_cluster.errors import HaloError
    from halo_cluster.lab.lab import Lab

    if out is not None:
        out.rule(
            "[bold]8. A 2-node lab on this machine: doctor over SSH, exporters, traffic, halo top,"
            " Ray, serve, benchmarks and the HTML report"
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
            state = lab.up(
                "demo", Path(tmp) / "lab", 2, 9000, None, default_engine(), default_llama_cpp()
            )
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
                "serve": _serve(state, out),
            }
        finally:
            lab.down(state)
            for proc in procs:
                proc.wait(timeout=10)
            if out is not None:
                out.print("lab removed")


def _doctor(state: LabState, out: Console | None) -> JsonObject:
    from halo_cluster.cli.doctor import render_report
    from halo_cluster.client.node import ssh_clients
    from halo_cluster.cluster.doctor import doctor_cluster
    from halo_cluster.config import load_config

    config = load_config(Path(state.dir) / "halo.toml")
    report = doctor_cluster(config, ssh_clients(config))
    from halo_cluster.config import halo_node_code

    code = halo_node_code()
    how = {
        name: next(f.summary for f in fs if f.check == "node.python")
        for name, fs in report.nodes.items()
        if any(f.check == "node.python" for f in fs)
    }
    if out is not None:
        shown = [f"{n.name} {n.mgmt_address} / fabric {n.fabric_address}" for n in state.nodes]
        out.print(f"nodes: {', '.join(shown)} (bare: no halo installed on them)")
        out.print(
            f"halo's node code: {len(code.data) // 1024} KiB, sha256 {code.digest[:16]}…, "
            "sent over SSH and cached by hash"
        )
        for name, summary in how.items():
            out.print(f"  {name}: {summary}")
        render_report(out, report)
    return {**report.to_dict(), "node_code": {"sha256": code.digest, "bytes": len(code.data)}}


def _monitor(
    lab: Lab, state: LabState, procs: list[subprocess.Popen[bytes]], out: Console | None
) -> JsonObject:
    from halo_cluster.client.node import ssh_clients
    from halo_cluster.config import halo_node_code, load_config
    from halo_cluster.monitor.deploy import exporter_units, install_units
    from halo_cluster.monitor.frame import build_frame, render_frame
    from halo_cluster.monitor.scrape import scrape
    from halo_cluster.runner.daemon import exec_start

    config = load_config(Path(state.dir) / "halo.toml")
    local = LocalRunner()
    targets = [f"{n.mgmt_address}:9877" for n in state.nodes]
    # as 'halo monitoring exporter-unit --install' deploys them; lab nodes run no systemd,
    # so each unit's ExecStart is started here, inside its node
    code = halo_node_code()
    units = exporter_units(config, config.nodes, code, "mgmt", 9877, "250ms")
    installed = install_units(ssh_clients(config), units, code)
    for unit, node in zip(units, state.nodes, strict=True):
        if installed[unit.node]["installed"]:
            procs.append(local.start(lab.exec_argv(node, exec_start(unit.unit))))
    deadline = time.monotonic() + 20
    while any(isinstance(scrape(t), str) for t in targets) and time.monotonic() < deadline:
        time.sleep(0.1)
    node1, node2 = state.nodes[0], state.nodes[1]
    if shutil.which("iperf3"):
        procs.append(
            local.start(lab.exec_argv(node2, ["iperf3", "-s", "-1", "-B", node2.fabric_address]))
        )
        time.sleep(0.3)
        procs.append(
            local.start(lab.exec_argv(node1, ["iperf3", "-c", node2.fabric_address, "-t", "3"]))
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
    return frame.to_dict()


def _serve(state: LabState, out: Console | None) -> JsonObject:
    """halo serve --engine llama.cpp without Ray, then halo up (Ray), halo serve with the
    real engine (vLLM's CPU build, TP=2 across the two nodes), its evidence, halo bench
    serve, the two engines side by side, then the fabric benchmarks, stop, down."""
    from halo_cluster.bench.serve_load import measure
    from halo_cluster.cluster.handle import Cluster
    from halo_cluster.config import load_config
    from halo_cluster.engines.request import serve_request
    from halo_cluster.errors import HaloError
    from halo_cluster.lab.tiny_model import FORMATS, write_model
    from halo_cluster.lab.tiny_spec import TinyModelSpec
    from halo_cluster.ray.lifecycle import Lifecycle
    from halo_cluster.serving.bringup import Serving

    say = out.print if out is not None else (lambda *_a, **_k: None)
    if state.engine is None:
        say("no engine environment ('make engine' builds it): skipping halo up / serve")
        return {"skipped": "no engine environment"}
    config_path = Path(state.dir) / "halo.toml"
    config = load_config(config_path)
    cluster = Cluster.over_ssh(config, lambda m: say(f"  {m}", style="dim"))
    lifecycle = Lifecycle(Cluster(config, cluster.clients))
    server = Serving(cluster)
    model = Path(state.dir) / "model"
    head = state.nodes[0]
    formats = FORMATS if state.llama_cpp else ("safetensors",)
    llama: EngineRun | None = None
    try:
        made = write_model(model, TinyModelSpec(), formats=formats)
        say(
            f"halo lab model: {made.parameters / 1e6:.1f} M-parameter Llama at {model} "
            f"({' and '.join(formats)}, the same weights)"
        )
        names = _sync_models(cluster, model, bool(state.llama_cpp), say)
        if state.llama_cpp:  # no Ray: llama.cpp's plans come from the nodes' facts
            llama = _llama(server, names["gguf"], head.mgmt_address, say)
            llama = replace(llama, tune=_tune(cluster, model, say))
        up = lifecycle.up()
        plans = ", ".join(f"{n}: {p.transport} {p.address}" for n, p in up.plans.items())
        say(f"halo up: Ray on {', '.join(up.nodes_alive)}, each with its own plan ({plans})")
        # on the lab's management bridge, which this machine alone reaches: no API key
        request = serve_request(
            config, model=names["dir"], tp=2, host=head.mgmt_address, wait_s=300, insecure=True
        )
        served = server.start(request)
        _evidence(served, say)
        bench = measure(served.url, None, [1, 4], 8, 32, 32, None)
        for level in bench.levels:
            say(
                f"halo bench serve, concurrency {level.concurrency}: "
                f"TTFT p50 {level.ttft_ms.p50} ms, ITL p50 {level.itl_ms.p50} ms, "
                f"{level.output_tokens_per_s} output tok/s"
            )
        say("halo stop: " + ("server stopped" if server.stop() else "no server was running"))
        if llama is not None:
            _side_by_side(EngineRun(served, bench), llama, say)
        lines: list[str] = []
        fabric = _fabric(state, config_path, lines.append)
        for line in lines:
            say(line)
    except HaloError as err:
        say(f"[yellow]halo up / serve failed:[/] {err}")
        return {"error": str(err)}
    finally:
        server.stop()
        lifecycle.down()
    say("halo down: done")
    skipped = {"skipped": "no llama.cpp build ('make llama-cpp' builds it)"}
    return {
        "up": up.nodes_alive,
        "serve": served_json(served),
        "bench": [level.to_dict() for level in bench.levels],
        "llama.cpp": llama.to_dict() if llama is not None else skipped,
        "fabric": fabric,
    }


def served_json(served: ServeResult) -> JsonObject:
    """What halo serve --json prints of a server (its NCCL/RCCL verdict aside)."""
    return {k: v for k, v in served.to_dict().items() if k != "verdict"}


@dataclass(frozen=True)
class Recovery:
    """The supervisor's states seen after the engine was killed, until it served again."""

    states: list[str]
    seconds: float
    restarts: int | None

    def to_dict(self) -> JsonObject:
        return {"states": list(self.states), "seconds": self.seconds, "restarts": self.restarts}


@dataclass(frozen=True)
class TuneDemo:
    """halo tune over llama.cpp's layouts, then halo run of the winner, then again."""

    tuned: Tuned
    first: RunResult
    again: RunResult

    def to_dict(self) -> JsonObject:
        return {
            "rows": [row.to_dict() for row in self.tuned.rows],
            "winner": self.tuned.winner(),
            "run": self.first.to_json(),
            "again": self.again.to_json(),
        }


@dataclass(frozen=True)
class EngineRun:
    """One engine served in the lab and measured by bench serve (llama.cpp: its supervisor's
    recovery and halo tune too)."""

    served: ServeResult
    bench: LoadRun
    recovery: Recovery | None = None
    tune: TuneDemo | None = None

    def to_dict(self) -> JsonObject:
        out: JsonObject = {
            "serve": served_json(self.served),
            "bench": [level.to_dict() for level in self.bench.levels],
            "recovery": self.recovery.to_dict() if self.recovery else None,
        }
        if self.tune is not None:
            out["tune"] = self.tune.to_dict()
        return out


def _sync_models(cluster: Any, model: Path, gguf: bool, say: Callable[..., None]) -> dict[str, str]:
    """halo model sync: the tiny model into every node's own store (vLLM's directory, and
    llama.cpp's GGUF file), then once more, which sends nothing. Returns the names."""
    from halo_cluster.errors import ModelError
    from halo_cluster.models.source import resolve_source
    from halo_cluster.models.sync import Sync

    names = {"dir": "tiny"}
    sources = [(str(model), "tiny")]
    if gguf:
        names["gguf"] = "tiny-gguf"
        sources.append((str(model / "model.gguf"), "tiny-gguf"))
    nodes = [n.name for n in cluster.config.nodes]
    for source, name in sources:
        for attempt in ("halo model sync", "again"):
            found = resolve_source(cluster, source, name)
            result = Sync(cluster, found, nodes).run()
            if not result.ok:
                bad = {n: r.reason for n, r in result.nodes.items() if r.reason}
                raise ModelError(f"halo model sync {name}: {bad}")
            states = {r.status for r in result.nodes.values()}
            what = (
                "already the same on every node (nothing sent)"
                if states == {"same"}
                else f"{result.sent / 1e6:.1f} MB sent once, into {len(nodes)} nodes' stores"
            )
            say(
                f"{attempt}: {name} ({len(found.manifest.files)} files, "
                f"{found.manifest.size / 1e6:.1f} MB) {what} in {result.seconds:.2f} s"
            )
    return names


def _llama(server: Any, gguf: str, host: str, say: Callable[..., None]) -> EngineRun:
    """The same model as GGUF, served by llama.cpp over RPC on the same nodes, benchmarked
    the same way, then stopped."""
    from halo_cluster.bench.serve_load import measure
    from halo_cluster.engines.request import serve_request

    request = serve_request(  # the lab's management bridge: this machine alone reaches it
        server.config, model=gguf, engine="llama.cpp", host=host, wait_s=120, insecure=True
    )
    served = server.start(request)
    engine = served.engine
    say(
        f"halo serve --engine llama.cpp (before 'halo up': no Ray): ready in "
        f"{served.ready_s:g} s at {served.url}; transport proven: {served.proven}"
    )
    for line in engine["rpc"]["evidence"]:
        say(f"  llama-server's own log: {line.split(' I ', 1)[-1]}")
    for worker in engine["rpc"]["workers"]:
        say(
            f"  {worker['source'].split(':')[0]}'s rpc-server: {worker['endpoint']}, "
            f"{worker['transport']}, {worker['clients']} connection(s) from the head"
        )
    for node, paths in served.traffic["nodes"].items():
        shown = ", ".join(
            f"{path} ({v['name']}) {v['bytes_per_token'] or 0:,.0f} B" for path, v in paths.items()
        )
        say(f"  counters per generated token on {node}: {shown}")
    bench = measure(served.url, None, [1, 4], 8, 32, 32, None)
    recovery = _recovery(server, say) if served.supervisor else None
    say("halo stop: " + ("server stopped" if server.stop() else "no server was running"))
    return EngineRun(served, bench, recovery)


def _tune(cluster: Any, model: Path, say: Callable[..., None]) -> TuneDemo:
    """halo tune over llama.cpp's layouts (one node, the layers over both), each proven by
    the three witnesses beside the planner's prediction; then halo run, which serves the
    winner, and halo run again, which only checks it."""
    from halo_cluster.config import results_dir
    from halo_cluster.recipes import tune as tuning
    from halo_cluster.recipes.layouts import parse_layout
    from halo_cluster.recipes.predict import predict
    from halo_cluster.recipes.run import run
    from halo_cluster.witness.tokens import tokens_word

    def quiet(message: str) -> None:
        say(f"  {message}", style="dim")

    files = tuning.model_files(cluster, str(model), quiet)
    layouts = tuning.ordered([parse_layout("llama.cpp RPC2", 2)])
    work = tuning.Workload((1,), prompts=4)
    predictions = predict(cluster.config, files, layouts, [1], results_dir())
    rows: list[tuning.TuneRow] = []
    tuning.Tuner(cluster, files, predictions, work, quiet).run(layouts, rows)
    name = cluster.config.name
    doc = tuning.document(name, files.name, "latency", work, predictions, rows, False)
    for row in rows:
        rate = row.rate("1")
        measured = rate.tokens_per_s if rate else None
        predicted = (row.predicted_tokens_per_s or {}).get("1")
        said = tokens_word(row.tokens) or "-"
        say(
            f"halo tune: {row.layout.name}: predicted {predicted or '-'} tok/s, "
            f"measured {measured or '-'} tok/s, tokens {said}, transport {row.proven}"
            + (f" ({row.error})" if row.error else "")
        )
    for note in predictions.notes:
        say(f"  {note}")
    say(f"halo tune's winner: {doc.reason}")
    with tempfile.TemporaryDirectory(prefix="halo-demo-tune-") as where:
        tuning_dir = Path(where)
        (tuning_dir / "tune-demo.json").write_text(json.dumps(doc.to_dict()))
        first = run(cluster, str(model), None, "llama.cpp", tuning_dir, quiet, 120)
        say(
            f"halo run: {first.layout} ({first.reason}) at {first.url}: measured "
            f"{first.measured_tokens_per_s} tok/s, proven {first.serve.get('proven')}"
        )
        again = run(cluster, str(model), None, "llama.cpp", tuning_dir, quiet, 120)
        say(f"halo run again: {'already serving' if again.already_running else 'started again'}")
    stopped = cluster_stop(cluster)
    say("halo stop: " + ("server stopped" if stopped else "no server was running"))
    return TuneDemo(doc, first, again)


def cluster_stop(cluster: Any) -> bool:
    from halo_cluster.serving.bringup import Serving

    return Serving(cluster).stop()


RECOVERY_BOUND_S = 180.0


def _recovery(server: Any, say: Callable[..., None]) -> Recovery:
    """The supervisor at work: llama-server on the head killed, 'halo status' watched from
    'restarting' back to 'serving' (the engine restarted and proven by the supervisor on the
    head, not by this process)."""
    from halo_cluster.engines import scripts
    from halo_cluster.supervise import control
    from halo_cluster.wire.supervise import SupervisorState

    cluster = server.cluster
    _log, pid = scripts.log_paths(cluster.config.name)

    def known(found: control.SupervisorStatus | None) -> SupervisorState | None:
        return found.state if found is not None else None

    first = known(control.status(cluster))
    before = first.restarts if first is not None else 0
    cluster.client(cluster.head).script(f'kill -KILL "$(cat {pid})"\n')
    say(f"killed llama-server on {cluster.head.name} (SIGKILL); halo status says:")
    started, found = time.monotonic(), first
    seen: list[str] = []
    last = "serving"
    while time.monotonic() - started < RECOVERY_BOUND_S:
        found = known(control.status(cluster))
        state = found.state if found is not None else "unknown"
        back = found is not None and state == "serving" and found.restarts > before
        if state != last or (back and not seen):
            seen.append(state)
            cause = found.cause if found is not None and state != "serving" else None
            say(f"  {time.monotonic() - started:5.1f} s  supervisor: {state}"
                + (f" ({cause})" if cause else ""))  # fmt: skip
            last = state
        if back:
            break
        time.sleep(0.5)
    took = round(time.monotonic() - started, 1)
    return Recovery(seen, took, found.restarts if found else None)


def _side_by_side(vllm: EngineRun, llama: EngineRun, say: Callable[..., None]) -> None:
    """One table in words: fabric bytes per token and output tok/s of both engines."""

    def fabric(served: ServeResult) -> str:
        nodes = served.traffic["nodes"].values()
        per = [p["fabric"]["bytes_per_token"] or 0 for p in nodes if "fabric" in p]
        return f"{max(per, default=0) / 1024:.1f} KiB"

    say(
        "same model, same two nodes: fabric bytes per token (busiest node), output tok/s at c1 / c4"
    )
    for name, run in (("vLLM TP=2", vllm), ("llama.cpp RPC", llama)):
        shown = " / ".join(f"{lv.output_tokens_per_s:g}" for lv in run.bench.levels)
        say(f"  {name:<14} {fabric(run.served):>10} per token   {shown} tok/s")


def _evidence(served: Any, say: Callable[..., None]) -> None:
    """What halo serve proved, in the demo's words: the engine's own lines, the counters."""
    engine = served.engine
    say(
        f"halo serve (vLLM {served.executor} executor, TP={served.tp}): ready in "
        f"{served.ready_s:g} s at {served.url}; transport proven: {served.proven}"
    )
    say(
        f"  vLLM's own log: backend {engine['backend']}, rendezvous "
        f"tcp://{engine['init_address']}:{engine['init_port']}"
    )
    for rank in served.ranks:
        say(f"  rank {rank['rank']} on {rank['node']} ({rank['address']})")
    for node, paths in served.traffic["nodes"].items():
        shown = ", ".join(
            f"{path} ({v['name']}) {v['bytes_per_token'] or 0:,.0f} B" for path, v in paths.items()
        )
        say(f"  counters per generated token on {node}: {shown}")


REPORT = "halo-demo-report.html"


def _fabric(state: LabState, config_path: Path, say: Callable[[str], None]) -> JsonObject:
    """bench net, bench collective and bench tp on the lab (Gloo), then the HTML report;
    one line per step to ``say``."""
    import json

    results: JsonObject = {}
    files = []
    runs = {
        "net": ["bench", "net", "--seconds", "1"],
        "collective": ["bench", "collective", "--sizes", "8B:1MiB", "--iters", "10"],
        "tp": ["bench", "tp", "llama-3.1-8b", "--batch", "1,8", "--steps", "3"],
    }
    import importlib.util

    if importlib.util.find_spec("torch") is None:  # the ranks need torch
        del runs["collective"], runs["tp"]
        results["skipped"] = "torch not installed (pip install 'halo-cluster[bench]')"
    for kind, args in runs.items():
        target = Path(state.dir) / f"{kind}.json"
        done = LocalRunner().run(
            [HALO, *args, "--config", str(config_path), "--json", "--out", str(target)],
            timeout=600,
        )
        if done.returncode != 0 or not target.exists():
            results[kind] = {"error": done.stderr.strip().splitlines()[-1:] or done.returncode}
            continue
        data = json.loads(target.read_text(encoding="utf-8"))
        files.append(str(target))
        results[kind] = data
        if kind == "net":
            shown = " / ".join(
                f"{p['path']} {p['latency_us']['p50']:.1f} µs ({p['latency_us']['tool']}), "
                f"{p['bandwidth_gbps']:.1f} Gb/s"
                for p in data["paths"]
                if p.get("latency_us") and p.get("bandwidth_gbps") is not None
            )
            say(f"halo bench net: {shown}")
        elif kind == "collective":
            fit = data.get("fit") or {}
            small, large = data["sweep"][0], data["sweep"][-1]
            say(
                f"halo bench collective ({data['backend']}, {data['world_size']} ranks, "
                f"{data['transport']['transport']}): {small['bytes']} B in "
                f"{small['time_us']:.0f} µs, {large['bytes']} B at {large['busbw_gbs']:.2f} GB/s"
                + (
                    f"; fit α {fit['alpha_us']:.0f} µs, β {fit['beta_gbps']:.2f} Gb/s"
                    if fit
                    else ""
                )
            )
        else:
            rows = ", ".join(
                f"batch {r['batch']}: {r['network_ms_per_token']:.1f} ms" for r in data["rows"]
            )
            say(f"halo bench tp llama-3.1-8b (network per token over Gloo): {rows}")
    if files:
        made = LocalRunner().run(
            [HALO, "report", *files, "-o", REPORT, "--title", "halo demo: lab fabric report"],
            timeout=120,
        )
        results["report"] = str(Path(REPORT).resolve()) if made.returncode == 0 else None
        if made.returncode == 0:
            say(f"halo report: wrote {Path(REPORT).resolve()}")
    return results
