"""One frame of ``halo top`` from two scrapes, as data: its JSON (``--once --json``) and
its text, with the labels an exporter sent kept as sent."""

from __future__ import annotations

from halo_cluster.monitor.frame import build_frame, render_frame

PORT = (("device", "rocep194s0"), ("port", "1"), ("extra", "x"))
NET = (("interface", "enp194s0np0"),)
OWN = (("cluster", "lab"),)


def _scrape(tx_bytes: float) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        ("halo_rdma_port_state", PORT): 4,
        ("halo_rdma_port_transmit_bytes_total", PORT): tx_bytes,
        ("halo_net_up", NET): 1,
        ("halo_net_transmit_packets_total", NET): tx_bytes / 1000,
        ("halo_net_receive_errors_total", NET): tx_bytes / 1e6,
        ("halo_probe_rtt_seconds", (("peer", "node2"), ("path", "fabric"), ("quantile", "0.5"))): 5e-6,
        ("halo_probe_rtt_seconds", (("peer", "node2"), ("path", "fabric"), ("quantile", "0.99"))): 9e-6,
        ("halo_probe_rtt_seconds", (("peer", "node2"), ("path", "fabric"), ("quantile", "x"))): 1.0,
        ("halo_alert", (("alert", "link_down"), ("subject", "interface=eno1"))): 1,
        ("halo_serve_state", (("cluster", "lab"), ("state", "serving"))): 1,
        ("halo_serve_state", (("cluster", "lab"), ("state", "failed"))): 0,
        ("halo_serve_restarts_total", OWN): 2,
        ("halo_serve_supervisor_up", OWN): 0,
    }  # fmt: skip


def test_a_frame_keeps_every_label_and_says_what_it_measured() -> None:
    frame = build_frame(
        {"n1": _scrape(0), "n2": "n2: refused"}, {"n1": _scrape(1e9), "n2": "n2: refused"}, 2.0
    )
    live, dead = frame.to_dict()["nodes"]  # type: ignore[misc]
    assert dead == {"target": "n2", "error": "n2: refused"}
    assert live == {
        "target": "n1",
        "ports": [{"device": "rocep194s0", "port": "1", "extra": "x", "state": "ACTIVE",
                   "tx_gbps": 4.0, "rx_gbps": 0.0}],
        "interfaces": [{"interface": "enp194s0np0", "up": True, "tx_gbps": 0.0, "rx_gbps": 0.0,
                        "tx_pps": 500000.0, "rx_pps": 0.0, "errors_per_s": 500.0}],
        # a quantile that names no number is passed over
        "probes": [{"peer": "node2", "path": "fabric", "p50_us": 5.0, "p99_us": 9.0}],
        "alerts": [{"alert": "link_down", "subject": "interface=eno1"}],
        "serving": [{"cluster": "lab", "state": "serving", "restarts": 2, "probe_latency_s": None,
                     "supervisor_up": False}],
    }  # fmt: skip
    text = render_frame(frame)
    assert "   rdma rocep194s0/1     ACTIVE   tx    4.000 Gb/s" in text
    assert "probe node2      fabric  p50      5.0 µs  p99      9.0 µs" in text
    assert "ALERT link_down: interface=eno1" in text and "SUPERVISOR DOWN" in text
    assert "unreachable: n2: refused" in text
