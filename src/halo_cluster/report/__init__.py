"""``halo report``: one self-contained HTML file from benchmark results — inline CSS and SVG,
no script and nothing fetched, so it opens anywhere (a mail attachment, an air-gapped host).

Pure: ``render(results)`` takes loaded result objects and returns the page. Every chart is an
``<svg class="chart" data-chart="…">``; every string from a result is escaped.

The primitives (SVG charts, tables) are in report/svg.py, the sections in report/sections.py,
the energy per output token in report/energy.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from halo_cluster import __version__
from halo_cluster.report.energy import energy_section
from halo_cluster.report.sections import (
    collective_section,
    net_section,
    result_label,
    run_section,
    stamp_section,
    tp_section,
    tune_section,
)
from halo_cluster.report.svg import esc
from halo_cluster.schema import (
    CollectiveBenchResult,
    NetBenchResult,
    RunResult,
    Stamp,
    TpBenchResult,
    TuneResult,
)

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 980px; color: #1a202c;
       background: #fff; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #cbd5e0; }
.meta { color: #4a5568; } table { border-collapse: collapse; margin: 0.5em 0 1em; }
td, th { border: 1px solid #cbd5e0; padding: 3px 8px; text-align: left; font-size: 13px; }
th { background: #edf2f7; } svg.chart { display: block; margin: 0.6em 0; background: #fcfcfd;
       border: 1px solid #e2e8f0; } .note { color: #718096; font-size: 12px; }
.warn { color: #9b2c2c; }
"""


def render(results: Sequence[dict[str, Any]], title: str = "halo fabric report") -> str:
    """The page of ``results``, each as bench/results.py ``load`` gave it (checked against
    its kind's type in schema.py), a ``label`` added where the caller names it."""
    labelled = [(result_label(r, i), r) for i, r in enumerate(results)]

    def of(kind: str) -> list[tuple[str, dict[str, Any]]]:
        return [(label, r) for label, r in labelled if r.get("kind") == kind]

    # each section reads its kind by the schema type that loading checked it against
    body = (
        net_section([(label, cast(NetBenchResult, r)) for label, r in of("net")])
        + collective_section(
            [(label, cast(CollectiveBenchResult, r)) for label, r in of("collective")]
        )
        + tp_section([(label, cast(TpBenchResult, r)) for label, r in of("tp")])
        + tune_section([(label, cast(TuneResult, r)) for label, r in of("tune")])
        + run_section([(label, cast(RunResult, r)) for label, r in of("run")])
        + energy_section(labelled)
        + stamp_section([(label, cast(Stamp, r)) for label, r in labelled])
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f'<h1>{esc(title)}</h1><p class="meta">{len(results)} result(s), '
        f"written by halo {esc(__version__)}</p>{body}</body></html>\n"
    )
