"""The planner's prediction for each layout of one model on this cluster: decode tokens/s at
each concurrency (the planner's batch), from the model's own file (a GGUF's tensor table for
llama.cpp, config.json for vLLM), the cluster's hardware profile and its link.

The link, in order: ``[cluster] link``; the latest ``halo bench collective`` result in the
results directory (its α/β fit); the transport's preset (``roce`` for RDMA, else ``tcp``).
A prediction that cannot be made (no profile measured, a model the planner cannot read) is
a note, never a number."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from halo_cluster import engine_registry
from halo_cluster.engines.layout import Layout
from halo_cluster.engines.protocol import find_engine as find_served
from halo_cluster.errors import HaloError
from halo_cluster.jsonout import JsonObject

if TYPE_CHECKING:
    from halo_cluster.capacity.estimate import Request
    from halo_cluster.config import Config


@dataclass(frozen=True)
class ModelFiles:
    """Where the model is, as each engine opens it: vLLM's directory (or store name) and
    llama.cpp's GGUF file, each as read here (for the planner) and as served (on the
    nodes)."""

    name: str
    hf_dir: Path | None = None  # here: config.json beside the weights
    gguf: Path | None = None  # here
    served: dict[str, str] = field(default_factory=dict)  # engine -> what 'halo serve' is given
    opened: dict[str, str] = field(default_factory=dict)  # engine -> its path, where known

    @property
    def engines(self) -> tuple[str, ...]:
        return tuple(e for e in engine_registry.names() if e in self.served)

    def served_path(self, engine: str, store: str) -> str:
        """The path the engine opens on the nodes (a store name is the store's directory)."""
        given = self.served[engine]
        if engine in self.opened:
            return self.opened[engine]
        return given if given.startswith("/") else f"{store.rstrip('/')}/{given}"


@dataclass(frozen=True)
class Predictions:
    link: str | None
    hardware: str
    by_layout: dict[str, dict[str, float]]  # layout name -> concurrency ("1") -> tokens/s
    notes: list[str]
    fits: dict[str, bool] = field(default_factory=dict)  # layout name -> the model fits

    def to_dict(self) -> JsonObject:
        return {
            "link": self.link,
            "hardware": self.hardware,
            "notes": list(self.notes),
        }


def link_for(config: Config, results: Path) -> str:
    """The link the planner is given (the module's docstring says which)."""
    if config.link:
        return config.link
    from halo_cluster.bench.results import listing

    found = [r for r in listing(results) if r.get("kind") == "collective" and "error" not in r]
    if found:
        return str(found[-1]["path"])
    return "roce" if config.transport in ("rdma", "roce", "ib", "infiniband") else "tcp"


def _request(config: Config, files: ModelFiles, engine: str, link_id: str) -> Request:
    from halo_cluster.capacity import catalog
    from halo_cluster.capacity.engines import find_engine
    from halo_cluster.capacity.estimate import Request
    from halo_cluster.config import profiles_dir

    hardware = catalog.find_hardware(config.hardware, profiles_dir())
    link = catalog.find_link(link_id, profiles_dir())
    context = config.serve.max_model_len or 1024
    if find_served(engine).model_format == "gguf":
        assert files.gguf is not None
        from halo_cluster.capacity.gguf_file import read_gguf

        found = read_gguf(files.gguf)
        return Request(
            found.spec, hardware, link, context=context,
            engine=find_engine(engine), weights=found.weights,
        )  # fmt: skip
    assert files.hf_dir is not None
    from halo_cluster.capacity.hf_config import model_from_hf_config

    spec = model_from_hf_config(files.hf_dir / "config.json")
    return Request(spec, hardware, link, context=context, engine=find_engine(engine))


def predict(
    config: Config, files: ModelFiles, layouts: list[Layout], levels: list[int], results: Path
) -> Predictions:
    """Each layout's predicted tokens/s at each concurrency level (the planner's decode
    rate for that batch), or a note saying why there is none."""
    from halo_cluster.capacity.estimate import evaluate

    link = link_for(config, results)
    notes: list[str] = []
    out: dict[str, dict[str, float]] = {}
    fits: dict[str, bool] = {}
    bases: dict[str, Request | None] = {}
    for engine in {layout.engine for layout in layouts}:
        gguf = find_served(engine).model_format == "gguf"
        if (files.gguf if gguf else files.hf_dir) is None:
            bases[engine] = None
            notes.append(f"no prediction for {engine}: the model's files are not on this machine")
            continue
        try:
            bases[engine] = _request(config, files, engine, link)
        except (HaloError, ValueError, OSError) as err:
            bases[engine] = None
            notes.append(f"no prediction for {engine}: {str(err).splitlines()[0][:200]}")
    for layout in layouts:
        base = bases.get(layout.engine)
        if base is None:
            continue
        rates = {}
        for level in levels:
            row = evaluate(replace(base, nodes=layout.nodes, batch=level), layout.tp, layout.pp)
            rates[str(level)] = round(row.tokens_per_s, 3)
            fits[layout.name] = row.fits
        out[layout.name] = rates
    return Predictions(link, config.hardware, out, notes, fits)
