"""halo lab for real: namespaces, bridges, sshd, faults, and nothing left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from halo_cluster.hostsfile import split

HALO = str(Path(sys.executable).parent / "halo")


def halo(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [HALO, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def leftovers(name: str) -> dict[str, list[str]]:
    """Live processes, namespaces and links that belong to lab ``name`` (zombies excluded:
    this sandbox's PID 1 does not reap re-parented children)."""
    netns = [
        line.split()[0]
        for line in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        if line.startswith(f"halo-{name}-")
    ]
    links = [
        line.split()[0]
        for line in subprocess.run(
            ["ip", "-br", "link"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        if line.startswith((f"hb{name}", f"hv{name}"))
    ]
    procs = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        alive = stat.rsplit(")", 1)[-1].split()[0] != "Z"
        if alive and (f".halo-lab/{name}/" in cmd or f"/run/halo/lab/{name}/" in cmd):
            procs.append(cmd)  # node processes, and SSH masters (named after their socket)
    registry = [str(p) for p in Path(f"/run/halo/lab/{name}").glob("*")]
    return {"netns": netns, "links": links, "processes": procs + registry}


@pytest.fixture
def workdir(tmp_path: Path, lab_host: None) -> Iterator[Path]:
    yield tmp_path
    for lab in (tmp_path / ".halo-lab").glob("*"):
        halo("lab", "down", "--name", lab.name, cwd=tmp_path, check=False)


def lab_exec(
    workdir: Path, name: str, node: str, *command: str
) -> subprocess.CompletedProcess[str]:
    return halo("lab", "exec", "--name", name, node, "--", *command, cwd=workdir, check=False)


def ssh(workdir: Path, name: str, node: str, *command: str) -> subprocess.CompletedProcess[str]:
    config = workdir / ".halo-lab" / name / "ssh_config"
    return subprocess.run(
        ["ssh", "-F", str(config), node, *command],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.lab
def test_up_ssh_isolation_mtu_faults_down(workdir: Path) -> None:
    halo("lab", "up", "--name", "ta", "--nodes", "3", cwd=workdir)
    status = json.loads(halo("lab", "status", "--json", cwd=workdir).stdout)
    assert [(n["name"], n["sshd"]) for n in status["nodes"]] == [
        ("node1", True),
        ("node2", True),
        ("node3", True),
    ]
    assert status["nodes"][0]["mgmt_address"].startswith("198.18.")
    assert status["nodes"][0]["fabric_address"].startswith("198.19.")
    # SSH from the host to each node, with its own hostname and process tree
    for node in ("node1", "node2", "node3"):
        result = ssh(workdir, "ta", node, "hostname; ps -e -o pid= | wc -l")
        assert result.returncode == 0, result.stderr
        hostname, count = result.stdout.split()
        assert hostname == node and int(count) < 15
    # node to node over the fabric
    config = workdir / ".halo-lab" / "ta" / "ssh_config"
    hop = ssh(workdir, "ta", "node1", "ssh", "-F", str(config), "node2-fabric", "hostname")
    assert hop.stdout.strip() == "node2", hop.stderr
    # private /tmp
    ssh(workdir, "ta", "node1", "touch /tmp/only-on-node1")
    assert ssh(workdir, "ta", "node2", "ls /tmp/only-on-node1").returncode != 0
    assert not Path("/tmp/only-on-node1").exists()
    # MTU 9000 carried on the fabric: 8972 bytes + 28 header, do not fragment
    fabric2 = status["nodes"][1]["fabric_address"]
    ping = lab_exec(
        workdir, "ta", "node1", "ping", "-c", "1", "-W", "2", "-M", "do", "-s", "8972", fabric2
    )
    assert ping.returncode == 0, ping.stdout + ping.stderr
    too_big = lab_exec(
        workdir, "ta", "node1", "ping", "-c", "1", "-W", "1", "-M", "do", "-s", "8973", fabric2
    )
    assert too_big.returncode != 0
    # isolation: kill -9 -1 inside node2 leaves node1 (and node3) alone
    lab_exec(workdir, "ta", "node2", "kill", "-9", "-1")
    after = json.loads(halo("lab", "status", "--json", "--name", "ta", cwd=workdir).stdout)
    assert [n["sshd"] for n in after["nodes"]] == [True, False, True]
    # cut / heal
    halo("lab", "cut", "--name", "ta", "node3", cwd=workdir)
    cut = lab_exec(
        workdir, "ta", "node1", "ping", "-c", "1", "-W", "1", status["nodes"][2]["fabric_address"]
    )
    assert cut.returncode != 0
    halo("lab", "heal", "--name", "ta", "node3", cwd=workdir)
    healed = lab_exec(
        workdir, "ta", "node1", "ping", "-c", "1", "-W", "2", status["nodes"][2]["fabric_address"]
    )
    assert healed.returncode == 0
    # a fabric rate on the running lab: tbf on both ends of every node's link, then none
    limited = json.loads(
        halo("lab", "rate", "--name", "ta", "2.5gbit", "--json", cwd=workdir).stdout
    )
    assert limited["fabric_rate"] == "2.5gbit"
    inner = lab_exec(workdir, "ta", "node2", "tc", "qdisc", "show", "dev", "enp194s0np0").stdout
    assert "tbf" in inner and "rate 2500Mbit" in inner
    host_end = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout
    assert host_end.count("rate 2500Mbit") >= 3  # the host's end of each node's fabric veth
    halo("lab", "rate", "--name", "ta", "1gbit", cwd=workdir)
    inner = lab_exec(workdir, "ta", "node3", "tc", "qdisc", "show", "dev", "enp194s0np0").stdout
    assert "rate 1Gbit" in inner
    assert halo("lab", "rate", "--name", "ta", "off", cwd=workdir).stdout.startswith(
        "fabric: no limit"
    )
    inner = lab_exec(workdir, "ta", "node2", "tc", "qdisc", "show", "dev", "enp194s0np0").stdout
    assert "tbf" not in inner
    bad = halo("lab", "rate", "--name", "ta", "fast", cwd=workdir, check=False)
    assert bad.returncode == 2 and "RATE 'fast': use a rate such as 1gbit" in bad.stderr
    # kill: a crashed machine
    halo("lab", "kill", "--name", "ta", "node1", cwd=workdir)
    killed = json.loads(halo("lab", "status", "--json", "--name", "ta", cwd=workdir).stdout)
    assert killed["nodes"][0]["sshd"] is False
    assert lab_exec(workdir, "ta", "node1", "true").returncode == 1
    # down leaves nothing
    halo("lab", "down", "--name", "ta", cwd=workdir)
    assert leftovers("ta") == {"netns": [], "links": [], "processes": []}
    assert not (workdir / ".halo-lab" / "ta").exists()
    assert "nothing to remove" in halo("lab", "down", "--name", "ta", cwd=workdir).stdout


@pytest.mark.lab
def test_nodes_are_hosts(workdir: Path, tmp_path: Path) -> None:
    """Private /dev/shm and HOME per node, a login's environment in lab exec (the caller's
    TMPDIR and XDG directories stay out), the engine environment read-only, and a
    halo.toml that serves with it."""
    engine = tmp_path / "engine"
    (engine / "bin").mkdir(parents=True)
    (engine / "bin" / "python").write_text("")
    halo("lab", "up", "--name", "th", "--engine", str(engine), cwd=workdir)
    lab = workdir / ".halo-lab" / "th"
    ssh(workdir, "th", "node1", "touch /dev/shm/only-on-node1")
    assert ssh(workdir, "th", "node2", "ls /dev/shm/only-on-node1").returncode != 0
    assert not Path("/dev/shm/only-on-node1").exists()
    homes = [ssh(workdir, "th", n, "echo $HOME").stdout.strip() for n in ("node1", "node2")]
    assert homes == [str(lab.resolve() / "home" / "node1"), str(lab.resolve() / "home" / "node2")]
    leaked = subprocess.run(
        [HALO, "lab", "exec", "--name", "th", "node2", "--", "env"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": "/tmp/shared", "XDG_STATE_HOME": "/x", "HALO_T": "1"},
        check=True,
    ).stdout.splitlines()
    names = {line.split("=", 1)[0] for line in leaked}
    assert not names & {"TMPDIR", "XDG_STATE_HOME", "HALO_T"}
    assert f"HOME={lab.resolve() / 'home' / 'node2'}" in leaked and "HOSTNAME=node2" in leaked
    readonly = lab_exec(workdir, "th", "node1", "touch", str(engine / "bin" / "x"))
    assert readonly.returncode != 0 and "Read-only file system" in readonly.stderr
    (engine / "bin" / "y").write_text("")  # the host's own view stays writable
    toml = (lab / "halo.toml").read_text()
    assert f'[ray]\ncommand = "{engine / "bin" / "ray"}"' in toml
    assert f'[serve.vllm]\ncommand = "{engine / "bin" / "vllm"}"' in toml
    assert 'VLLM_CPU_OMP_THREADS_BIND = "0"' in toml and 'VLLM_CPU_OMP_THREADS_BIND = "1"' in toml
    none = halo("lab", "up", "--name", "tn", "--no-engine", "--no-llama-cpp", cwd=workdir)
    assert "engine: none" in none.stdout and "llama.cpp: none" in none.stdout
    assert "[serve]" not in (workdir / ".halo-lab" / "tn" / "halo.toml").read_text()
    # a llama.cpp build alone: its own [serve.llama_cpp] table, read-only on the nodes
    build = tmp_path / "llama"
    (build / "bin").mkdir(parents=True)
    (build / "bin" / "llama-server").write_text("")
    only = halo("lab", "up", "--name", "tl", "--no-engine", "--llama-cpp", str(build), cwd=workdir)
    assert f"llama.cpp: {build}" in only.stdout
    text = (workdir / ".halo-lab" / "tl" / "halo.toml").read_text()
    assert f'[serve.llama_cpp]\nbuild = "{build}"\nthreads = 1\n' in text
    assert "command =" not in text
    readonly = lab_exec(workdir, "tl", "node1", "touch", str(build / "bin" / "z"))
    assert readonly.returncode != 0 and "Read-only file system" in readonly.stderr
    wrong = halo(
        "lab", "up", "--name", "tw", "--llama-cpp", str(tmp_path), cwd=workdir, check=False
    )
    assert wrong.returncode == 2 and "not a llama.cpp build (no bin/llama-server)" in wrong.stderr
    bad = halo("lab", "up", "--name", "tb", "--engine", str(tmp_path), cwd=workdir, check=False)
    assert bad.returncode == 2 and "not an environment (no bin/python)" in bad.stderr


@pytest.mark.lab
def test_two_labs_side_by_side_and_doctor(workdir: Path) -> None:
    halo("lab", "up", "--name", "one", cwd=workdir)
    halo("lab", "up", "--name", "two", cwd=workdir)
    again = halo("lab", "up", "--name", "one", cwd=workdir, check=False)
    assert again.returncode == 1 and "already exists" in again.stderr
    one = json.loads(halo("lab", "status", "--name", "one", "--json", cwd=workdir).stdout)
    two = json.loads(halo("lab", "status", "--name", "two", "--json", cwd=workdir).stdout)
    assert one["nodes"][0]["mgmt_address"] != two["nodes"][0]["mgmt_address"]
    assert all(n["sshd"] for n in one["nodes"] + two["nodes"])
    doctor = halo("doctor", "--config", one["config"], "--json", cwd=workdir, check=False)
    data = json.loads(doctor.stdout)
    cluster = {f["check"]: f["severity"] for f in data["cluster"]["findings"]}
    assert cluster["cluster.reachable"] == "ok" and cluster["cluster.fabric_ping"] == "ok"
    assert cluster["cluster.transport_match"] == "ok" and cluster["cluster.mtu_match"] == "ok"
    assert cluster["cluster.names"] == "ok"  # each node's /etc/hosts holds the lab's names
    # node1 loses the names (its /etc/hosts, mounted over its own, without halo's block):
    # the doctor names what node1 cannot resolve; 'halo setup' writes them back, in place
    hosts = Path(one["dir"]) / "hosts.node1"
    kept = hosts.read_text()
    before, _block, after = split(kept)
    hosts.write_text(before + after)
    lost = json.loads(halo("doctor", "--config", one["config"], "--json", cwd=workdir,
                           check=False).stdout)  # fmt: skip
    [names] = [f for f in lost["cluster"]["findings"] if f["check"] == "cluster.names"]
    assert names["severity"] == "warn" and names["evidence"][0].startswith(
        "node1: node2 -> not resolved"
    ), names
    halo("setup", "--config", one["config"], "--step", "names", "--apply", "--yes", cwd=workdir)
    assert hosts.read_text() == kept
    assert "node2" in lab_exec(workdir, "one", "node1", "getent", "hosts", "node2").stdout
    halo("lab", "down", "--name", "one", cwd=workdir)
    assert json.loads(halo("lab", "status", "--name", "two", "--json", cwd=workdir).stdout)[
        "nodes"
    ][0]["sshd"]
    halo("lab", "down", "--name", "two", cwd=workdir)
    assert leftovers("one") == leftovers("two") == {"netns": [], "links": [], "processes": []}


def neighbour_thresholds() -> list[str]:
    return [
        Path(f"/proc/sys/net/ipv4/neigh/default/gc_thresh{i}").read_text().strip()
        for i in (1, 2, 3)
    ]


@pytest.mark.lab
def test_thirty_two_nodes_every_path_answers_and_nothing_is_left(workdir: Path) -> None:
    """The largest lab: up, every node answers SSH, every one of the 992 fabric paths
    answers the doctor's ping (the host's neighbour table made room for them all), and
    down leaves nothing: no namespace, link or process, and the host's thresholds back."""
    before = neighbour_thresholds()
    halo("lab", "up", "--name", "big", "--nodes", "32", cwd=workdir)
    try:
        status = json.loads(halo("lab", "status", "--name", "big", "--json", cwd=workdir).stdout)
        assert len(status["nodes"]) == 32 and all(n["sshd"] for n in status["nodes"])
        doctor = halo("doctor", "--config", status["config"], "--json", cwd=workdir, check=False)
        findings = {f["check"]: f for f in json.loads(doctor.stdout)["cluster"]["findings"]}
        assert findings["cluster.reachable"]["severity"] == "ok"
        assert (findings["cluster.fabric_ping"]["severity"], findings["cluster.fabric_ping"][
            "summary"]) == ("ok", "all 992 fabric paths answer ping")  # fmt: skip
    finally:
        halo("lab", "down", "--name", "big", cwd=workdir)
    assert leftovers("big") == {"netns": [], "links": [], "processes": []}
    from halo_cluster.lab.state import registered_names

    if registered_names():  # a lab beside it (a parallel run): the last 'down' restores them
        assert Path("/run/halo/lab/neighbour-table.json").exists()
        assert all(int(a) >= int(b) for a, b in zip(neighbour_thresholds(), before, strict=True))
    else:  # the last lab gone: the host's own thresholds back
        assert neighbour_thresholds() == before
        assert not Path("/run/halo/lab/neighbour-table.json").exists()


@pytest.mark.lab
def test_half_built_lab_goes_down(workdir: Path) -> None:
    from halo_cluster.lab.lab import Lab
    from halo_cluster.lab.state import new_lab_state, write_state

    directory = workdir / ".halo-lab" / "half"
    directory.mkdir(parents=True)
    state = new_lab_state("half", directory, 2, 9000, 250)
    write_state(state)
    subprocess.run(["ip", "netns", "add", state.nodes[0].netns], check=True)
    subprocess.run(["ip", "link", "add", state.mgmt_bridge, "type", "bridge"], check=True)
    halo("lab", "down", "--name", "half", cwd=workdir)
    assert leftovers("half") == {"netns": [], "links": [], "processes": []}
    assert Lab  # the same code path the CLI uses


@pytest.mark.lab
def test_usage_errors(workdir: Path) -> None:
    bad = halo("lab", "up", "--name", "Bad_Name", cwd=workdir, check=False)
    assert bad.returncode == 2 and "lowercase" in bad.stderr
    assert halo("lab", "up", "--nodes", "33", cwd=workdir, check=False).returncode == 2
    missing = halo("lab", "status", "--name", "nope", cwd=workdir, check=False)
    assert missing.returncode == 2 and "halo lab up --name nope" in missing.stderr


def test_clear_errors_without_root_or_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    from halo_cluster.lab import lab as lab_module

    monkeypatch.setattr(lab_module.os, "geteuid", lambda: 1000)
    with pytest.raises(lab_module.LabError, match="needs root"):
        lab_module.require_tools()
    monkeypatch.setattr(lab_module.os, "geteuid", lambda: 0)
    monkeypatch.setattr(
        lab_module.shutil, "which", lambda tool: None if tool == "sshd" else f"/usr/bin/{tool}"
    )
    monkeypatch.setattr(lab_module.os.path, "exists", lambda path: False)
    with pytest.raises(lab_module.LabError, match="'sshd' not found: install openssh-server"):
        lab_module.require_tools()


@pytest.mark.lab
def test_setup_apply_inside_a_lab_node(workdir: Path) -> None:
    """--apply for real where it can run: fabric address and MTU through ip, the limits file."""
    memlock_file = Path("/etc/security/limits.d/90-halo-memlock.conf")
    existed = memlock_file.exists()
    halo("lab", "up", "--name", "st", "--fabric-mtu", "1500", cwd=workdir)
    status = json.loads(halo("lab", "status", "--name", "st", "--json", cwd=workdir).stdout)
    new_address = status["nodes"][0]["fabric_address"].rsplit(".", 1)[0] + ".77/24"
    args = [  # over SSH: the lab's nodes are bare, halo sends its node code
        "setup",
        "--node",
        "node1",
        "--config",
        status["config"],
        "--step",
        "network",
        "--step",
        "memlock",
        "--fabric-iface",
        "enp194s0np0",
        "--address",
        new_address,
        "--mtu",
        "9000",
        "--json",
        "--apply",
        "--yes",
    ]
    try:
        first = json.loads(halo(*args, cwd=workdir).stdout)
        node = next(iter(first["nodes"].values()))
        expected_applied = ["network"] if existed else ["network", "memlock"]
        assert node["applied"] == expected_applied
        assert all(step["done"] for step in node["steps"])
        shown = lab_exec(workdir, "st", "node1", "ip", "-br", "addr", "show", "enp194s0np0").stdout
        assert new_address in shown
        mtu = lab_exec(workdir, "st", "node1", "cat", "/sys/class/net/enp194s0np0/mtu").stdout
        assert mtu.strip() == "9000"
        second = json.loads(halo(*args, cwd=workdir).stdout)
        assert next(iter(second["nodes"].values()))["applied"] == []
        doctor = json.loads(
            halo("doctor", "--config", status["config"], "--json", cwd=workdir, check=False).stdout
        )
        node1 = {f["check"]: f["severity"] for f in doctor["nodes"]["node1"]["findings"]}
        assert node1["net.mtu_jumbo"] == "ok"
        cluster = {f["check"]: f["severity"] for f in doctor["cluster"]["findings"]}
        assert cluster["cluster.mtu_match"] == "fail"  # node2 still at 1500
        # the same plan, asked from the host over SSH for both nodes
        remote = json.loads(
            halo(
                "setup",
                "--node",
                "node1",
                "--node",
                "node2",
                "--config",
                status["config"],
                "--step",
                "network",
                "--fabric-iface",
                "enp194s0np0",
                "--json",
                cwd=workdir,
            ).stdout
        )
        assert [remote["nodes"][n]["steps"][0]["done"] for n in ("node1", "node2")] == [True, False]
        assert remote["nodes"]["node2"]["steps"][0]["commands"] == [
            "sudo ip link set dev enp194s0np0 mtu 9000"
        ]
    finally:
        if not existed:
            memlock_file.unlink(missing_ok=True)


def established(address: str) -> int:
    """TCP connections from this host to sshd on ``address``."""
    out = subprocess.run(
        ["ss", "-tnH", "state", "established", "dst", f"{address}:22"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return len(out.splitlines())


@pytest.mark.lab
def test_ssh_connections_are_shared_one_master_per_node(workdir: Path) -> None:
    """halo's SSH runner on real sshd: with the lab's ssh_config (which shares connections
    itself) every command goes through the lab's one master per node; with an ssh_config
    that does not, through halo's own master in its control directory, which
    close_connections (halo down) ends."""
    from halo_cluster.runner.result import TIMED_OUT
    from halo_cluster.runner.sharing import close_connections, control_dir
    from halo_cluster.runner.ssh import SSHRunner

    halo("lab", "up", "--name", "sr", cwd=workdir)
    lab = workdir / ".halo-lab" / "sr"
    status = json.loads(halo("lab", "status", "--name", "sr", "--json", cwd=workdir).stdout)
    node1, node2 = (n["mgmt_address"] for n in status["nodes"])
    plain = lab / "ssh_config.plain"  # the lab's ssh_config without its Control* lines
    plain.write_text(
        "".join(
            line
            for line in (lab / "ssh_config").read_text().splitlines(keepends=True)
            if "Control" not in line
        )
    )
    lab_runner, halo_runner = SSHRunner("node1", lab / "ssh_config"), SSHRunner("node2", plain)
    shared = control_dir()
    assert shared is not None
    others = {p for p in shared.iterdir() if p.is_socket()}  # other clusters' masters
    for _ in range(5):
        assert lab_runner.run(["hostname"]).stdout == "node1\n"
        assert halo_runner.run(["cat", "/proc/sys/kernel/hostname"]).stdout == "node2\n"
    assert (established(node1), established(node2)) == (1, 1)
    labs_sockets = [p for p in Path("/run/halo/lab/sr/ssh").iterdir() if p.is_socket()]
    assert len(labs_sockets) == 1
    halos = [p for p in shared.iterdir() if p.is_socket() and p not in others]
    assert len(halos) == 1 and halos[0].name != labs_sockets[0].name
    # stdin scripts and exit codes travel through the shared connection
    script = halo_runner.run(["bash", "-s"], stdin="echo in; exit 3\n")
    assert (script.returncode, script.stdout) == (3, "in\n")
    # halo down ends halo's master, and leaves the lab's (the lab's own ssh_config) alone
    assert close_connections(["node1"], lab / "ssh_config") == []
    assert close_connections(["node1", "node2"], plain) == ["node2"]
    deadline = time.monotonic() + 30  # a bound on a hang: it ends once the master is gone
    while established(node2) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (established(node1), established(node2)) == (1, 0)
    assert not any(p.is_socket() and p.name == halos[0].name for p in shared.iterdir())
    # first commands at once: one makes the master, the others run on their own, and none
    # of them has ssh's word about it in its stderr
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: halo_runner.run(["echo", "x"]), range(4)))
    assert [(r.returncode, r.stdout, r.stderr) for r in results] == [(0, "x\n", "")] * 4
    assert close_connections(["node2"], plain) == ["node2"]
    # a node that dies takes its shared connection with it: the next command fails fast
    halo("lab", "kill", "--name", "sr", "node1", cwd=workdir)
    gone = lab_runner.run(["true"], timeout=30)
    assert not gone.ok and gone.returncode != TIMED_OUT, gone  # it failed, not waited it out
    halo("lab", "down", "--name", "sr", cwd=workdir)
    assert leftovers("sr") == {"netns": [], "links": [], "processes": []}


@pytest.mark.lab
def test_a_lab_is_found_by_name_from_anywhere(workdir: Path) -> None:
    halo("lab", "up", "--name", "rg", cwd=workdir)
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    status = json.loads(halo("lab", "status", "--name", "rg", "--json", cwd=elsewhere).stdout)
    assert status["dir"] == str((workdir / ".halo-lab" / "rg").resolve())
    assert lab_exec(elsewhere, "rg", "node2", "hostname").stdout == "node2\n"
    # the name is taken, wherever the other lab lives
    again = halo("lab", "up", "--name", "rg", cwd=elsewhere, check=False)
    assert again.returncode == 1 and f"already exists in {status['dir']}" in again.stderr
    # its directory removed: the lab still runs, is still found, and goes down by name
    shutil.rmtree(workdir / ".halo-lab" / "rg")
    assert [
        n["sshd"]
        for n in json.loads(halo("lab", "status", "--name", "rg", "--json", cwd=elsewhere).stdout)[
            "nodes"
        ]
    ] == [True, True]
    assert halo("lab", "down", "--name", "rg", cwd=elsewhere).stdout == "lab rg removed\n"
    assert leftovers("rg") == {"netns": [], "links": [], "processes": []}
    # directory and registry both gone: what is named after it still goes
    halo("lab", "up", "--name", "rz", cwd=workdir)
    ssh(workdir, "rz", "node1", "true")  # a master too
    shutil.rmtree(workdir / ".halo-lab" / "rz")
    Path("/run/halo/lab/rz/state.json").unlink()
    down = halo("lab", "down", "--name", "rz", cwd=elsewhere)
    assert down.stdout.startswith(
        "lab rz: its directory was gone; removed 2 namespace(s), 6 link(s), "
    )
    assert leftovers("rz") == {"netns": [], "links": [], "processes": []}
    assert halo("lab", "down", "--name", "rz", cwd=elsewhere).stdout == (
        "no lab named rz: nothing to remove\n"
    )
