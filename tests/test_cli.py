"""The halo command as a user runs it: a real process, real exit codes, real output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from halo_cluster import __version__
from tests.conftest import EXPECTED, ROOTS


def halo(
    *args: str, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "halo_cluster", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )


def test_help_lists_commands_and_imports_nothing_heavy() -> None:
    code = (
        "import sys; from halo_cluster.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = {'ray', 'torch', 'textual', 'rich', 'halo_cluster.facts.inventory'}\n"
        "heavy = (heavy | {'matplotlib'}) & set(sys.modules)\n"
        "print('HEAVY', sorted(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "inventory" in out and "demo" in out
    assert "HEAVY []" in out


def test_version() -> None:
    result = halo("--version")
    assert result.returncode == 0 and __version__ in result.stdout


@pytest.mark.parametrize("scenario", ["strix-e810", "connectx-roce", "odd-content"])
def test_inventory_json_is_the_contract(scenario: str) -> None:
    result = halo("inventory", "--root", str(ROOTS / scenario), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(
        (EXPECTED / f"{scenario}.inventory.json").read_text()
    )


def test_inventory_tables() -> None:
    result = halo("inventory", "--root", str(ROOTS / "strix-e810"))
    assert result.returncode == 0, result.stderr
    for text in (
        "rocep194s0",
        "irdma",
        "[1] 192.168.100.1",
        "enp194s0np0",
        "gfx1151",
        "16.0 GT/s x4",
        "unlimited",
    ):
        assert text in result.stdout


def test_inventory_tables_show_warnings() -> None:
    result = halo("inventory", "--root", str(ROOTS / "odd-content"))
    assert result.returncode == 0
    assert "warning: /sys/class/net/lo/mtu: not an integer" in result.stdout


def test_missing_root_is_one_line_exit_2(tmp_path: Path) -> None:
    result = halo("inventory", "--root", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_option_is_a_usage_error() -> None:
    result = halo("inventory", "--bogus")
    assert result.returncode == 2 and "No such option" in result.stderr


def test_demo_json(tmp_path: Path) -> None:
    """The bundled-data part as JSON (the lab part, which takes minutes, is checked above)."""
    result = halo("demo", "--json", "--no-lab", cwd=tmp_path, timeout=600)
    data = json.loads(result.stdout)
    assert data["lab"] == data["mesh"] == data["gateway"] == {"skipped": "--no-lab"}
    assert set(data) == {
        "inventory", "doctor", "setup", "plan", "plans", "verify_log", "lab", "mesh", "gateway",
    }  # fmt: skip
    assert data["plan"]["collectives_per_token"] == 162
    assert data["doctor"]["strix-e810-misconfigured"]["summary"]["fail"] == 2
    assert data["plans"]["strix-e810"]["gid_index"] == 1
    assert data["verify_log"]["nccl-socket-fallback.log"]["ok"] is False


def test_env_shell_eval_in_bash() -> None:
    root = str(ROOTS / "strix-e810")
    script = (
        f'eval "$({sys.executable} -m halo_cluster env --root {root} --peer 192.168.100.2)"; env'
    )
    result = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "NCCL_IB_HCA==rocep194s0:1" in result.stdout
    assert "NCCL_IB_GID_INDEX=1" in result.stdout


def test_env_json_keys_exactly() -> None:
    result = halo("env", "--root", str(ROOTS / "connectx-roce"), "--peer", "10.200.1.20", "--json")
    data = json.loads(result.stdout)
    assert list(data) == [
        "transport",
        "hca",
        "device",
        "port",
        "gid_index",
        "socket_ifname",
        "address",
        "apu",
        "rails",
        "identity",
        "env",
        "reasons",
        "warnings",
    ]
    assert data["hca"] == "mlx5_10:1" and data["gid_index"] == 3
    assert (data["device"], data["port"], data["apu"]) == ("mlx5_10", 1, False)


def test_env_impossible_transport_is_one_line_error() -> None:
    result = halo("env", "--root", str(ROOTS / "port-down"), "--transport", "infiniband")
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and "infiniband requested" in result.stderr


def test_doctor_exit_codes_and_json() -> None:
    bad = halo("doctor", "--root", str(ROOTS / "strix-e810-misconfigured"), "--json")
    assert bad.returncode == 1
    data = json.loads(bad.stdout)
    assert set(data) == {"nodes", "cluster", "summary"}
    findings = data["nodes"]["strix2"]["findings"]
    assert findings[0]["severity"] == "fail"  # worst first
    assert set(findings[0]) == {"check", "severity", "summary", "evidence", "fix"}
    assert data["summary"]["fail"] == 2
    assert halo("doctor", "--root", str(ROOTS / "strix-e810")).returncode == 0
    assert halo("doctor", "--root", str(ROOTS / "strix-e810"), "--strict").returncode == 0
    assert halo("doctor", "--root", str(ROOTS / "connectx-roce"), "--strict").returncode == 1


def test_doctor_tables_show_fixes() -> None:
    result = halo("doctor", "--root", str(ROOTS / "strix-e810-misconfigured"))
    assert "FAIL" in result.stdout and "dev.infiniband" in result.stdout
    assert "sudo firewall-cmd --permanent --zone=trusted" in result.stdout


def test_doctor_config_errors(tmp_path: Path) -> None:
    (tmp_path / "halo.toml").write_text('[cluster]\ntransport = "pigeon"\n[[node]]\nname = "a"\n')
    result = halo("doctor", "--config", str(tmp_path / "halo.toml"))
    assert result.returncode == 2 and "halo.toml:2: cluster.transport" in result.stderr
    missing = halo("doctor", "--config", str(tmp_path / "nope.toml"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    (tmp_path / "halo.toml").write_text('[[node]]\nname = "a"\n')
    unknown = halo("doctor", "--config", str(tmp_path / "halo.toml"), "--node", "b")
    assert unknown.returncode == 2 and "no node named 'b'" in unknown.stderr


def test_setup_and_container_commands() -> None:
    plan = halo("setup", "--root", str(ROOTS / "strix-e810-misconfigured"), "--json")
    assert plan.returncode == 0, plan.stderr
    steps = {s["id"]: s for s in next(iter(json.loads(plan.stdout)["nodes"].values()))["steps"]}
    assert steps["kernel"]["reboot"] and not steps["kernel"]["done"]
    refused = halo("setup", "--root", str(ROOTS / "strix-e810-misconfigured"), "--apply", "--yes")
    assert refused.returncode == 2 and "without --root" in refused.stderr
    table_out = halo("setup", "--root", str(ROOTS / "connectx-roce"))
    assert "sudo ufw allow in on ens1f0np0" in table_out.stdout
    made = halo("container", "--root", str(ROOTS / "strix-e810"), "--image", "img", "--json")
    assert json.loads(made.stdout)["argv"][:2] == ["podman", "run"]
    assert (
        halo("container", "--root", str(ROOTS / "strix-e810")).returncode == 2
    )  # --image is required


def test_plan_command() -> None:
    result = halo("plan", "llama-3.3-70b", "--json")
    data = json.loads(result.stdout)
    assert set(data["rows"][0]) == {
        "layout",
        "tp",
        "pp",
        "link",
        "fits",
        "weights_gib_per_node",
        "kv_gib_per_node",
        "max_context",
        "decode_ms_compute",
        "decode_ms_network",
        "tokens_per_s",
        "network_share",
        "tokens_per_s_batch1",
        "engine",
        "tokens_per_s_low",
        "tokens_per_s_high",
        "weights_source",
        "efficiency_source",
        "replicas",
        "note",
    }
    assert (
        data["recommendation"]["layout"] == "TP2" and data["recommendation"]["link"] == "roce-e810"
    )
    assert "qwen3-235b-a22b" in halo("plan", "--list").stdout
    assert halo("plan", "no-such-model").returncode == 2
    assert halo("plan").returncode == 2
