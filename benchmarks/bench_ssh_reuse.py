"""SSH connection reuse: `halo up` and `halo status` on a 2-node lab whose ssh_config does
*not* share connections, before and after halo's SSH runner shares one connection per node,
side by side with OpenSSH's own ControlMaster as the lab's ssh_config sets it (the speed the
lab had, and real clusters did not). Needs root and Ray in the engine environment.

Three ssh_configs of the same lab, measured alternately in one run:

- before: "ControlMaster no" + "ControlPath none" (halo honours the user's ssh config, so this
  is exactly what halo did before: one TCP connection and SSH handshake per command);
- after: no Control* lines at all (halo's runner shares, in its own control directory);
- lab_ssh_config: the lab's own ControlMaster/ControlPersist lines (the peer).

Every `up` and every "cold" `status` starts with no shared connection (all masters closed);
the "warm" `status` runs right after the cold one, as an operator's next command would.
Target (issue 16): after is faster than before for every command, and within 1.15x of the
lab's own ssh_config. Writes benchmarks/results/ssh_reuse.json.

    sudo .venv/bin/python benchmarks/bench_ssh_reuse.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HALO = str(Path(sys.executable).parent / "halo")
LAB = "bssh"
VARIANTS = ("before", "after", "lab_ssh_config")


def run(argv: list[str], cwd: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.perf_counter() - start


def variant_configs(lab: Path) -> dict[str, Path]:
    """One ssh_config and one halo.toml per variant, in the lab's directory."""
    original = (lab / "ssh_config").read_text()
    plain = "".join(line for line in original.splitlines(True) if "Control" not in line)
    ssh_configs = {
        "before": plain.replace(
            "  LogLevel ERROR\n", "  LogLevel ERROR\n  ControlMaster no\n  ControlPath none\n"
        ),
        "after": plain,
        "lab_ssh_config": original,
    }
    toml = (lab / "halo.toml").read_text()
    configs = {}
    for name, text in ssh_configs.items():
        (lab / f"ssh_config.{name}").write_text(text)
        config = lab / f"halo.{name}.toml"
        config.write_text(
            toml.replace('ssh_config = "ssh_config"', f'ssh_config = "ssh_config.{name}"')
        )
        configs[name] = config
    assert "ControlMaster" not in ssh_configs["after"]
    return configs


def close_all(lab: Path, nodes: list[str]) -> None:
    """No shared connection left: the lab's masters and halo's."""
    from halo_cluster.runner.sharing import close_connections

    for node in nodes:
        subprocess.run(
            ["ssh", "-F", str(lab / "ssh_config"), "-O", "exit", "--", node],
            capture_output=True,
            check=False,
        )
    close_connections(nodes, lab / "ssh_config.after")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, dict[str, list[float]]] = {
        v: {"up_s": [], "status_cold_s": [], "status_warm_s": []} for v in VARIANTS
    }
    with tempfile.TemporaryDirectory() as cwd:
        run([HALO, "lab", "up", "--name", LAB], cwd)
        lab = Path(cwd) / ".halo-lab" / LAB
        nodes = [n["name"] for n in json.loads((lab / "state.json").read_text())["nodes"]]
        configs = variant_configs(lab)
        try:
            for _ in range(args.runs):
                for variant in VARIANTS:  # alternately, so all see the same machine state
                    config = str(configs[variant])
                    close_all(lab, nodes)
                    times[variant]["up_s"].append(run([HALO, "up", "--config", config], cwd))
                    close_all(lab, nodes)
                    times[variant]["status_cold_s"].append(
                        run([HALO, "status", "--config", config], cwd)
                    )
                    times[variant]["status_warm_s"].append(
                        run([HALO, "status", "--config", config], cwd)
                    )
                    run([HALO, "down", "--config", config], cwd)
        finally:
            close_all(lab, nodes)
            subprocess.run(
                [HALO, "lab", "down", "--name", LAB], cwd=cwd, check=False, capture_output=True
            )
    median = {v: {k: statistics.median(x) for k, x in m.items()} for v, m in times.items()}
    ratios = {
        f"{k}_after_over_{other}": round(median["after"][k] / median[other][k], 3)
        for other in ("before", "lab_ssh_config")
        for k in ("up_s", "status_cold_s", "status_warm_s")
    }
    out = {
        "benchmark": "ssh_reuse",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "system": platform.platform(),
            "ssh": subprocess.run(["ssh", "-V"], capture_output=True, text=True).stderr.strip(),
        },
        "lab_nodes": len(nodes),
        "runs": args.runs,
        "seconds": {
            v: {k: [round(x, 3) for x in xs] for k, xs in m.items()} for v, m in times.items()
        },
        "median_s": {v: {k: round(x, 3) for k, x in m.items()} for v, m in median.items()},
        "ratios": ratios,
        "met": {
            "after_faster_than_before": all(
                median["after"][k] < median["before"][k] for k in median["after"]
            ),
            "after_within_1_15x_of_lab_ssh_config": all(
                ratios[f"{k}_after_over_lab_ssh_config"] <= 1.15 for k in median["after"]
            ),
        },
    }
    (HERE / "results" / "ssh_reuse.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
