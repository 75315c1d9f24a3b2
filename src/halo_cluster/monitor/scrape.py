"""Read exporters over HTTP: one ``/metrics`` page parsed into samples, or the error text.

The TUI and ``halo top`` both read exporters through here (the TUI takes a fake scraper in
the tests; scrape takes a fake HTTP GET). Nothing heavy is imported at module level."""

from __future__ import annotations

import urllib.error
from typing import Any

from halo_cluster.bounded.httpget import HttpGet, http_get
from halo_cluster.client.fanout import each
from halo_cluster.errors import ParseError


def scrape(target: str, timeout_s: float = 3.0, get: HttpGet = http_get) -> dict[Any, float] | str:
    """One exporter's samples, or the error text."""
    # the parser pulls in the sampler and the fact readers: not at import, because
    # cli/monitor.py imports this module and ``halo --help`` imports every command module
    from halo_cluster.monitor.exposition import parse

    url = target if target.startswith("http") else f"http://{target}/metrics"
    try:
        return parse(get(url, None, timeout_s, None).decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ParseError) as err:
        return f"{target}: {getattr(err, 'reason', err)}"


def scrape_all(targets: list[str]) -> dict[str, Any]:
    """Every exporter at once (up to fanout's limit): a slow one costs its own timeout, not
    everyone's. ``scrape`` answers an error as text, so nothing is raised."""
    return dict(zip(targets, each(targets, scrape), strict=True))
