"""Live fabric monitoring: sampler, rates, probes, alerts, Prometheus exporter, dashboard."""
