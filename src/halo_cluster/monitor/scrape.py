"""Read exporters over HTTP: one ``/metrics`` page parsed into samples, or the error text.

The TUI and ``halo top`` both read exporters through here (the TUI takes a fake scraper in
the tests; scrape takes a fake HTTP GET). Nothing heavy is imported at module level."""

from __future__ import annotations

import urllib.error
from typing import Any

from halo_cluster.bounded.httpget import HttpGet, http_get
from halo_cluster.bounded.infile import size_text
from halo_cluster.client.fanout import each
from halo_cluster.errors import ParseError

# a node's page is some KiB (one line a series); parsed, a page costs ~170 times its size
# (a 5 MB page took 850 MB), and ``halo top`` reads every node's at once
MAX_PAGE_BYTES = 1 << 20


def scrape(target: str, timeout_s: float = 3.0, get: HttpGet = http_get) -> dict[Any, float] | str:
    """One exporter's samples, or the error text (a page over ``MAX_PAGE_BYTES`` is one)."""
    # the parser pulls in the sampler and the fact readers: not at import, because
    # cli/monitor.py imports this module and ``halo --help`` imports every command module
    from halo_cluster.monitor.exposition import parse

    url = target if target.startswith("http") else f"http://{target}/metrics"
    try:
        page = get(url, None, timeout_s, MAX_PAGE_BYTES + 1)
        if len(page) > MAX_PAGE_BYTES:
            return (
                f"{target}: a page larger than {size_text(MAX_PAGE_BYTES)}: "
                "not a halo exporter's (check the target)"
            )
        return parse(page.decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ParseError) as err:
        return f"{target}: {getattr(err, 'reason', err)}"


def scrape_all(targets: list[str]) -> dict[str, Any]:
    """Every exporter at once (up to fanout's limit): a slow one costs its own timeout, not
    everyone's. ``scrape`` answers an error as text, so nothing is raised."""
    return dict(zip(targets, each(targets, scrape), strict=True))
