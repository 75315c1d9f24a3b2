"""The bench driver (``halo bench-driver``, on the head node): places one rank per GPU (per
node without GPUs) as Ray actors, runs the all-reduce sweep or the decode replay, and reports
JSON lines (bench/events.py). Imports Ray and torch only when it runs."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from halo_cluster.bench.allreduce import (
    fit_alpha_beta,
    sweep_row,
    tp_schedule,
    transport_verdict,
)
from halo_cluster.bench.events import Emit
from halo_cluster.bench.rank import Worker
from halo_cluster.errors import DriverError
from halo_cluster.jsonout import JsonObject
from halo_cluster.runner.local import LocalRunner
from halo_cluster.schema import SweepRow
from halo_cluster.stats import quantile
from halo_cluster.units import human_bytes


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        port: int = probe.getsockname()[1]
        return port


def _unreachable(addresses: dict[str, str]) -> list[str]:
    """Nodes whose fabric address does not answer a ping from here (the head)."""
    lost = []
    for name, address in addresses.items():
        if not LocalRunner().run(["ping", "-c", "1", "-W", "1", address], timeout=5).ok:
            lost.append(f"{name} ({address})")
    return lost


def _cause(err: Exception, task: bool = True) -> str:
    """A Ray error's cause in one line: a task's last line (the exception it raised), an
    actor's first (how it died)."""
    lines = [line.strip() for line in str(err).strip().splitlines()] or [type(err).__name__]
    return lines[-1] if task else lines[0]


def _failures(nodes: list[str], failed: dict[int, str], lost: list[str]) -> tuple[str, str]:
    """(the nodes of the ``failed`` ranks, in rank order; each rank's cause, then the nodes
    that do not answer on the fabric)."""
    names = ", ".join(dict.fromkeys(nodes[r] for r in failed))
    causes = "; ".join(f"rank {r}: {cause}" for r, cause in failed.items())
    where = f"; {', '.join(lost)} does not answer on the fabric" if lost else ""
    return names, causes + where


def not_joined(nodes: list[str], failed: dict[int, str], store: str, lost: list[str]) -> str:
    """The error when ranks did not join the rendezvous, naming the nodes that did not."""
    names, causes = _failures(nodes, failed, lost)
    if 0 in failed:
        return f"process group init: the store on {nodes[0]} ({store}) did not start ({causes})"
    return f"process group init: {names} did not join the store on {nodes[0]} ({store}): {causes}"


def init_failed(nodes: list[str], failed: dict[int, str], lost: list[str]) -> str:
    """The error when every rank joined but the process group did not form on some."""
    names, causes = _failures(nodes, failed, lost)
    return f"process group init failed on {names}: {causes}"


def package_dir() -> str:
    """This package as a directory, for Ray to ship: where it is installed, else (halo's
    node code, run from its zipapp, already checked against its hash) unpacked once beside
    the zipapp."""
    import halo_cluster

    package = os.path.dirname(halo_cluster.__file__)
    if os.path.isdir(package):
        return package
    import shutil
    import tempfile
    import zipfile

    archive = os.path.dirname(package)  # .../node-HASH.pyz
    target = archive[: -len(".pyz")] + ".d"
    if not os.path.isdir(os.path.join(target, "halo_cluster")):
        stage = tempfile.mkdtemp(prefix=".unpack-", dir=os.path.dirname(archive))
        with zipfile.ZipFile(archive) as zipped:
            names = [n for n in zipped.namelist() if n.startswith("halo_cluster/")]
            zipped.extractall(stage, names)
        try:
            os.rename(stage, target)
        except OSError:  # unpacked meanwhile by another run
            shutil.rmtree(stage, ignore_errors=True)
    return os.path.join(target, "halo_cluster")


class Ranks:
    """The actors of one run, placed one per GPU (one per node without GPUs): ``actors[r]``
    is rank r, on node ``nodes[r]``."""

    def __init__(
        self, spec: dict[str, Any], emit: Emit, ray: Any, actors: list[Any], nodes: list[str]
    ) -> None:
        self.spec, self.emit, self.ray = spec, emit, ray
        self.actors, self.nodes = actors, nodes
        self.addresses = {n["name"]: n["address"] for n in spec["nodes"]}
        self.world = len(actors)
        if self.world < 2:
            raise DriverError("an all-reduce across nodes needs at least two ranks")

    @classmethod
    def place(cls, spec: dict[str, Any], emit: Emit) -> Ranks:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        # The ranks run in the Python of each node's Ray (the engine environment, which
        # need not have halo): Ray ships this package to them.
        package = package_dir()
        ray.init(
            address="auto",
            logging_level=logging.ERROR,
            log_to_driver=False,
            runtime_env={"py_modules": [package]},
        )
        alive = {n["NodeManagerAddress"]: n for n in ray.nodes() if n.get("Alive")}  # type: ignore[no-untyped-call]
        addresses = {n["name"]: n["address"] for n in spec["nodes"]}
        missing = [f"{name} ({a})" for name, a in addresses.items() if a not in alive]
        if missing:
            raise DriverError(f"not in the Ray cluster: {', '.join(missing)} (run 'halo up' first)")
        slots = []  # (node name, Ray node id, one GPU per rank or none)
        for node in spec["nodes"]:
            info = alive[node["address"]]
            gpus = int(info.get("Resources", {}).get("GPU", 0))
            wanted = node.get("gpus")
            count = gpus if wanted is None else min(gpus, wanted)
            slots += [(node["name"], info["NodeID"], count > 0)] * max(1, count)
        tp = spec.get("tp")
        if tp is not None and tp > len(slots):
            raise DriverError(f"--tp {tp}: the cluster has {len(slots)} ranks")
        slots = slots[:tp] if tp else slots
        remote = ray.remote(Worker)
        actors = [
            remote.options(
                num_cpus=0,
                num_gpus=1 if gpu else 0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote()
            for _name, node_id, gpu in slots
        ]
        return cls(spec, emit, ray, actors, [name for name, _id, _gpu in slots])

    def get(self, refs: Any, what: str, timeout: float) -> Any:
        errors = self.ray.exceptions
        try:
            return self.ray.get(refs, timeout=timeout)
        except errors.GetTimeoutError:
            said = f"{what} did not finish within {timeout:g} s"
        except errors.RayActorError as err:  # a node gone from the fabric kills its rank
            said = f"{what}: a rank died ({_cause(err, task=False)})"
        except errors.RayTaskError as err:  # a collective cut off mid-way errs, too
            said = f"{what} failed: {_cause(err)}"
        lost = self._lost()
        raise DriverError(
            said + (f": {', '.join(lost)} does not answer on the fabric" if lost else "")
        )

    def each(self, refs: list[Any], timeout: float, done: Callable[[int], str]) -> dict[int, str]:
        """Wait for one call per rank (``refs[r]``), saying ``done(r)`` as each succeeds; why
        each other rank did not (its error, or no answer within ``timeout``)."""
        ray, rank_of = self.ray, {ref: r for r, ref in enumerate(refs)}
        failed: dict[int, str] = {}
        pending, deadline = list(refs), time.monotonic() + timeout
        while pending:
            left = max(deadline - time.monotonic(), 0)
            finished, pending = ray.wait(pending, num_returns=1, timeout=left)
            if not finished:
                break
            for ref in finished:
                try:
                    ray.get(ref)
                except ray.exceptions.RayError as err:
                    task = isinstance(err, ray.exceptions.RayTaskError)
                    failed[rank_of[ref]] = _cause(err, task)
                else:
                    self.emit({"event": "progress", "message": done(rank_of[ref])})
        failed.update({rank_of[ref]: f"no answer within {timeout:g} s" for ref in pending})
        return dict(sorted(failed.items()))

    def start(self) -> tuple[list[dict[str, Any]], str]:
        spec = self.spec
        facts = self.get([a.facts.remote() for a in self.actors], "starting the ranks", 120)
        backend = spec["backend"]
        if backend == "auto":
            backend = "nccl" if all(f["gpus"] > 0 for f in facts) else "gloo"
        if backend == "nccl" and not all(f["gpus"] > 0 for f in facts):
            raise DriverError("--backend nccl needs a GPU on every rank; the lab has none (gloo)")
        debug = None
        if backend == "nccl":
            debug = f"/tmp/halo-nccl-{spec['run_id']}.%h.%p.log"
        master = self.addresses[spec["nodes"][0]["name"]]
        port = _free_port()
        timeout = spec["timeout"]
        self.emit({"event": "progress", "message": f"{self.world} ranks, {backend} init"})
        joins = [
            a.join.remote(r, self.world, master, port, timeout) for r, a in enumerate(self.actors)
        ]
        failed = self.each(joins, timeout + 30, lambda r: f"rank {r} on {self.nodes[r]}: joined")
        if failed:
            raise DriverError(not_joined(self.nodes, failed, f"{master}:{port}", self._lost()))
        inits = [a.setup.remote(backend, timeout, debug) for a in self.actors]
        failed = self.each(inits, timeout + 30, lambda r: f"rank {r} on {self.nodes[r]}: init done")
        if failed:
            raise DriverError(init_failed(self.nodes, failed, self._lost()))
        return facts, backend

    def _lost(self) -> list[str]:
        return _unreachable(self.addresses)

    def verdict(self, backend: str, facts: list[dict[str, Any]]) -> JsonObject:
        logs: list[str] = []
        if backend == "nccl":
            logs = self.get([a.debug_log.remote() for a in self.actors], "reading NCCL logs", 30)
        return transport_verdict(backend, facts, logs)

    def close(self, graceful: bool) -> None:
        """Tear the process group down; after a failure a rank may hang in a collective,
        so the actors are killed without asking."""
        if graceful:
            with contextlib.suppress(Exception):
                self.ray.get([a.close.remote() for a in self.actors], timeout=10)
        for actor in self.actors:
            self.ray.kill(actor)


def run_sweep(ranks: Ranks, spec: dict[str, Any], emit: Emit) -> list[SweepRow]:
    rows = []
    for size in spec["sizes"]:
        times = ranks.get(
            [a.allreduce.remote(size, spec["iters"], spec["warmup"]) for a in ranks.actors],
            f"all-reduce of {human_bytes(size)}",
            spec["timeout"],
        )
        row = sweep_row(size, max(times), ranks.world)
        rows.append(row)
        emit({"event": "row", "row": row})
        emit(
            {
                "event": "progress",
                "message": f"{human_bytes(size):>8}  {row['time_us']:10.1f} µs  "
                f"busbw {row['busbw_gbs']:.3f} GB/s",
            }
        )
    return rows


def run_tp(ranks: Ranks, spec: dict[str, Any], emit: Emit) -> list[dict[str, Any]]:
    rows = []
    model = spec["model"]
    for batch in spec["batches"]:
        schedule = tp_schedule(model["layers"], model["hidden"], batch)
        per_rank = ranks.get(
            [
                a.decode_steps.remote(schedule["bytes"], schedule["allreduces"], spec["steps"], 1)
                for a in ranks.actors
            ],
            f"decode replay at batch {batch}",
            spec["timeout"],
        )
        steps = [max(values) for values in zip(*per_rank)]
        ms = (quantile(steps, 0.5) or 0.0) * 1e3
        rows.append(
            {
                "batch": batch,
                "allreduces_per_token": schedule["allreduces"],
                "bytes_per_allreduce": schedule["bytes"],
                "network_ms_per_token": round(ms, 4),
                "network_ms_p90": round((quantile(steps, 0.9) or 0.0) * 1e3, 4),
                "tokens_per_s_ceiling": round(batch * 1e3 / ms, 2) if ms > 0 else None,
                "per_sequence_tokens_per_s_ceiling": round(1e3 / ms, 2) if ms > 0 else None,
            }
        )
        emit({"event": "row", "row": rows[-1]})
        emit(
            {
                "event": "progress",
                "message": f"batch {batch:>4}: {ms:8.3f} ms of network per token",
            }
        )
    return rows


def drive(spec: dict[str, Any], emit: Emit) -> JsonObject:
    """The whole run on the head; returns the result body (no stamp, no file)."""
    ranks = Ranks.place(spec, emit)
    finished = False
    try:
        facts, backend = ranks.start()
        body: dict[str, Any] = {
            "backend": backend,
            "ranks": [
                {"rank": r, "node": node, **{k: f[k] for k in ("hostname", "gpus", "env")}}
                for r, (node, f) in enumerate(zip(ranks.nodes, facts))
            ],
            "versions": {k: facts[0][k] for k in ("torch", "nccl", "ray", "hip")},
            "world_size": ranks.world,
        }
        if spec["kind"] == "collective":
            rows = run_sweep(ranks, spec, emit)
            body.update(
                {"iters": spec["iters"], "sweep": rows, "fit": fit_alpha_beta(rows, ranks.world)}
            )
        else:
            body.update(
                {"model": spec["model"], "steps": spec["steps"], "rows": run_tp(ranks, spec, emit)}
            )
        body["transport"] = ranks.verdict(backend, facts)
        finished = True
        return body
    finally:
        ranks.close(graceful=finished)


def main_driver(spec_text: str, out: Callable[[str], None]) -> int:
    """``halo bench-driver``: spec JSON in, JSON lines out; exit 0 with a result, 1 without."""

    def emit(event: dict[str, Any]) -> None:
        out(json.dumps(event))

    try:
        spec = json.loads(spec_text)
    except ValueError as err:
        emit({"event": "error", "message": f"bad driver spec: {err}"})
        return 1
    try:
        emit({"event": "result", "result": drive(spec, emit)})
        return 0
    except DriverError as err:
        emit({"event": "error", "message": str(err)})
    except ImportError as err:
        emit({"event": "error", "message": f"{err.name or err} is not installed on the head"})
    except ConnectionError as err:
        first = str(err).split(". ")[0]
        emit({"event": "error", "message": f"no Ray cluster on the head ({first}): run 'halo up'"})
    return 1
