"""The Grafana dashboard, systemd unit and Prometheus example refer to metrics that exist."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from halo_cluster.monitor.exposition import METRICS

CONTRIB = Path(__file__).parents[2] / "contrib"


def test_grafana_dashboard_uses_real_metrics() -> None:
    dashboard = json.loads((CONTRIB / "grafana" / "halo-fabric.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    names = {n for e in exprs for n in re.findall(r"\bhalo_[a-z_]+", e)}
    assert names and names <= set(METRICS)
    assert len(dashboard["panels"]) >= 6


def test_grafana_dashboard_shows_watts_per_source_and_the_rate_of_joules() -> None:
    dashboard = json.loads((CONTRIB / "grafana" / "halo-fabric.json").read_text())
    power = {
        target["expr"]: (panel["fieldConfig"]["defaults"]["unit"], target["legendFormat"])
        for panel in dashboard["panels"]
        for target in panel["targets"]
        if "halo_node_" in target["expr"]
    }
    legend = "{{node}} {{domain}} {{source}}"
    assert power == {
        "halo_node_power_watts": ("watt", legend),
        "rate(halo_node_energy_joules_total[$__rate_interval])": ("watt", legend),
    }
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_systemd_unit_runs_the_exporter_on_localhost() -> None:
    unit = (CONTRIB / "systemd" / "halo-exporter.service").read_text()
    assert "ExecStart=" in unit and " exporter " in unit and "--listen 127.0.0.1:9877" in unit


def test_prometheus_config_command(tmp_path: Path) -> None:
    config = tmp_path / "halo.toml"
    config.write_text(
        '[cluster]\nname = "strix"\n[[node]]\nname = "strix1"\nssh = "root@192.168.1.51"\n'
        'mgmt_address = "192.168.1.51"\n[[node]]\nname = "strix2"\nssh = "strix2.lan"\n'
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "halo_cluster",
            "monitoring",
            "prometheus-config",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert '- targets: ["192.168.1.51:9877"]' in out and '- targets: ["strix2.lan:9877"]' in out
    assert '        labels: {"node": "strix1", "cluster": "strix"}' in out
    assert "job_name: halo" in out and 'scrape_interval: "5s"' in out
    assert "# the gateway's router metrics listen on the head's loopback" in out
    assert "halo-gateway" not in out
    config.write_text(config.read_text() + '[gateway]\nmetrics_host = "0.0.0.0"\n')
    argv = [sys.executable, "-m", "halo_cluster", "monitoring", "prometheus-config"]
    out = subprocess.run(
        [*argv, "--config", str(config)], capture_output=True, text=True, check=True
    ).stdout
    gateway = out.split("  - job_name: halo-gateway\n", 1)[1].splitlines()
    assert gateway[2:] == [
        '      - targets: ["192.168.1.51:29080"]',
        '        labels: {"cluster": "strix", "node": "strix1"}',
    ]


def test_grafana_dashboard_has_a_panel_per_deployment_and_the_gateway() -> None:
    dashboard = json.loads((CONTRIB / "grafana" / "halo-fabric.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["deployment"]["definition"] == "label_values(halo_serve_state, cluster)"
    repeated = [p for p in dashboard["panels"] if p.get("repeat") == "deployment"]
    assert len(repeated) == 1 and "$deployment" in repeated[0]["targets"][0]["expr"]
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    assert "vllm_router_cb_outcomes_total" in exprs and "vllm_router_worker_health" in exprs


def test_prometheus_config_cannot_be_injected(tmp_path: Path) -> None:
    """A config path with a newline stays in its comment; a bad interval is refused."""
    odd = tmp_path / "a\nscrape_configs: evil"
    odd.mkdir()
    config = odd / "halo.toml"
    config.write_text('[cluster]\nname = "c"\n[[node]]\nname = "n1"\nssh = "n1"\n')
    argv = [sys.executable, "-m", "halo_cluster", "monitoring", "prometheus-config"]
    out = subprocess.run(
        [*argv, "--config", str(config)], capture_output=True, text=True, check=True
    ).stdout
    assert [line for line in out.splitlines() if line.startswith("scrape")] == ["scrape_configs:"]
    assert "\\nscrape_configs: evil" in out
    bad = subprocess.run(
        [*argv, "--config", str(config), "--interval", "5s\n  - job_name: evil"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and "evil" not in bad.stdout
