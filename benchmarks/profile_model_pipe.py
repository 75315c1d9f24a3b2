"""Where one GB of a model sync goes: the chain's hops (``halo node model-pipe``, the same
code a node runs) on this machine's loopback, each a process under cProfile, the source
reading its files and every other hop receiving, writing, hashing and forwarding.

For each hop: wall seconds, CPU seconds (user and system, from the kernel), and the main
thread's time per operation (cProfile's own time of the calls that do the work: socket
receive and send, sendfile, file read and write, sha256, fsync), the rest as Python's own
per-chunk work. Work on other threads (the hop's file finisher, a hashing thread) is in the
CPU seconds, not in the per-operation split: the split is of the thread that moves the
bytes. Per GB: seconds / (model bytes / 1e9).

    .venv/bin/python benchmarks/profile_model_pipe.py [--size-mib 1024] [--hops 3] [--label now]

Writes benchmarks/results/model_pipe_profile.json (the entry ``--label``; the others kept).
No network beyond loopback, no root.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from halo_cluster.modelstore.manifest import HashCache, make_manifest  # noqa: E402
from halo_cluster.modelstore.transfer import (  # noqa: E402
    PipeSpec,
    RouteHop,
    StreamFile,
    parse_pipe_event,
)

# a hop as a node runs it (node/main.py), under cProfile
RUNNER = """
import cProfile, sys
from halo_cluster.node.main import main
profile = cProfile.Profile()
code = profile.runcall(main, ["model-pipe"])
profile.dump_stats(sys.argv[1])
sys.exit(code)
"""
OUT = HERE / "results" / "model_pipe_profile.json"
FILES = 5
# cProfile's names of the calls that do a hop's work, by what they do
OPERATIONS = {
    "recv": ("recv_into", "recv"),
    "send": ("sendall", "send"),
    "sendfile": ("sendfile",),
    "splice": ("splice",),
    "read": ("readinto", "read", "pread", "preadv"),
    "write": ("write", "pwrite", "writev"),
    "sha256": ("update",),
    "fsync": ("fsync", "fdatasync"),
    "wait": ("poll", "select", "acquire", "wait"),  # for a peer, a free block, a thread
}


def make_files(top: Path, size_mib: int) -> list[tuple[str, str]]:
    """FILES files of random bytes, ``size_mib`` together (the last one a small config)."""
    top.mkdir(parents=True)
    per = size_mib // (FILES - 1)
    files = []
    block = os.urandom(1 << 20)
    for index in range(1, FILES):
        path = top / f"part-{index}.safetensors"
        with open(path, "wb") as handle:
            for n in range(per):
                handle.write(block[n % 7 :] + block[: n % 7])  # no two MiB alike
        files.append((path.name, str(path)))
    (top / "config.json").write_text('{"n": 1}\n')
    files.append(("config.json", str(top / "config.json")))
    return files


class Hop:
    """One hop's process: its events as they come, its rusage when it ends."""

    def __init__(self, name: str, spec: PipeSpec, work: Path) -> None:
        self.name = name
        self.profile = work / f"{name}.prof"
        env = {
            **os.environ,
            "HALO_MODEL_SPEC": spec.to_json(),
            "PYTHONPATH": str(HERE.parent / "src"),
        }
        argv = [sys.executable, "-c", RUNNER, str(self.profile)]
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
        self.listening = threading.Event()
        self.address: tuple[str, int] | None = None
        self.done: dict[str, Any] | None = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = parse_pipe_event(line)
            if event is None:
                continue
            if event.kind == "listening":
                self.address = (str(event.address), int(event.port or 0))
                self.listening.set()
            elif event.kind == "done" and event.done is not None:
                self.done = event.done.to_dict()

    def wait(self) -> dict[str, Any]:
        _pid, status, usage = os.wait4(self.proc.pid, 0)
        wall = time.perf_counter() - self.started
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.reader.join(10)
        return {
            "exit": self.proc.returncode,
            "wall_s": round(wall, 3),
            "user_s": round(usage.ru_utime, 3),
            "system_s": round(usage.ru_stime, 3),
            "main_thread_s": split(self.profile),
            "done": self.done,
        }


def split(profile: Path) -> dict[str, float]:
    """The main thread's own time per operation, and Python's own (everything else)."""
    stats = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    out = dict.fromkeys([*OPERATIONS, "python"], 0.0)
    for (filename, _line, function), (_cc, _nc, tottime, _ct, _callers) in stats.items():
        kind = "python"
        if filename == "~":  # a built-in: '<method 'update' of '_hashlib.HASH' objects>'
            name = function.split("'")[1] if "'" in function else function
            name = name.rpartition(".")[2]
            kind = next((k for k, names in OPERATIONS.items() if name in names), "python")
        out[kind] += tottime
    return {k: round(v, 3) for k, v in out.items()}


def run(size_mib: int, hops: int, where: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        work = Path(tmp)
        files = make_files(work / "source", size_mib)
        manifest = make_manifest("m", files, "", "profile", HashCache(str(work / "cache.json")))
        stream = tuple(StreamFile(f.path, f.size, f.sha256, 0) for f in manifest.files)
        want = {f.path: 0 for f in manifest.files}

        def spec(store: str, **more: Any) -> PipeSpec:
            return PipeSpec(
                run="profile",
                store=store,
                target=bool(store),
                manifest=manifest,
                stream=stream,
                want=want if store else {},
                **more,
            )

        receivers = []
        for index in range(hops):
            secret = os.urandom(32).hex()
            store = str(work / f"store-{index + 1}")
            hop = Hop(f"hop{index + 1}", spec(store, listen="127.0.0.1", secret=secret), work)
            receivers.append((hop, secret))
        route = []
        for hop, secret in receivers:
            if not hop.listening.wait(30) or hop.address is None:
                raise SystemExit(f"{hop.name} did not listen")
            route.append(RouteHop(hop.address[0], hop.address[1], secret))
        subprocess.run(["sync"], check=False)  # the source files on disk before the clock
        started = time.perf_counter()
        source = Hop("source", spec("", files=dict(files), route=tuple(route)), work)
        results = {"source": source.wait()}
        for hop, _secret in receivers:
            results[hop.name] = hop.wait()
        wall = time.perf_counter() - started
        gb = manifest.size / 1e9
        for result in results.values():
            cpu = result["user_s"] + result["system_s"]
            result["cpu_s_per_gb"] = round(cpu / gb, 3)
            result["main_thread_s_per_gb"] = {
                k: round(v / gb, 3) for k, v in result["main_thread_s"].items()
            }
        return {
            "model": {"files": len(manifest.files), "bytes": manifest.size},
            "hops": hops,
            "wall_s": round(wall, 3),
            "mb_s": round(manifest.size / wall / 1e6, 1),
            "processes": results,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--hops", type=int, default=3)
    parser.add_argument("--label", default="now", help="the entry's name in the result file")
    parser.add_argument(
        "--dir",
        default="/dev/shm",
        help="where the source and the stores are (default: a "
        "tmpfs, as the lab's nodes have; a disk adds its own speed)",
    )
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "src"], capture_output=True, text=True, check=False
    ).stdout.strip()
    entry = {
        "commit": commit,
        "src_uncommitted": bool(dirty),
        "date": time.strftime("%Y-%m-%d"),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "dir": args.dir,
        **run(args.size_mib, args.hops, args.dir),
    }
    data = json.loads(OUT.read_text()) if OUT.exists() else {"schema": "halo.model_pipe_profile/1"}
    data.setdefault("runs", {})[args.label] = entry
    tmp = OUT.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(OUT)
    print(json.dumps({k: v for k, v in entry.items() if k != "processes"}, indent=1))
    for name, result in entry["processes"].items():
        print(
            name,
            result["wall_s"],
            "s",
            result["cpu_s_per_gb"],
            "cpu-s/GB",
            result["main_thread_s_per_gb"],
        )


if __name__ == "__main__":
    main()
