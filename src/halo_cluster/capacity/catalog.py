"""Model, hardware and link profiles (data files in halo_cluster/data, extended by
halo_cluster/capacity/data/models.json), and a link measured by ``halo bench collective``.
A model read from a local ``config.json`` is capacity/hf_config.py's."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

from halo_cluster.capacity.hf_config import read_json_object
from halo_cluster.capacity.spec import Hardware, Link, ModelSpec
from halo_cluster.errors import UsageError
from halo_cluster.schema import SCHEMAS, require_kind

COLLECTIVE_SCHEMA = SCHEMAS["collective"]  # what `halo bench collective` writes


def _data(name: str) -> dict[str, Any]:
    text = resources.files("halo_cluster.data").joinpath(name).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def capacity_data(*parts: str) -> dict[str, Any]:
    """A JSON data file of the capacity planner (halo_cluster/capacity/data/…)."""
    node = resources.files("halo_cluster.capacity").joinpath("data", *parts)
    data: dict[str, Any] = json.loads(node.read_text(encoding="utf-8"))
    return data


def models() -> dict[str, ModelSpec]:
    """The catalog: the shared model file plus the capacity planner's additions and, per model, how
    its vendor counts the published active parameters."""
    extra = capacity_data("models.json")
    entries: dict[str, dict[str, Any]] = {
        key: {**value, **extra["overrides"].get(key, {})}
        for key, value in _data("models.json")["models"].items()
    }
    entries.update(extra["models"])
    return {key: ModelSpec(id=key, **value) for key, value in entries.items()}


def hardware_profiles() -> dict[str, Hardware]:
    return {
        key: Hardware(id=key, **value) for key, value in _data("hardware.json")["hardware"].items()
    }


def links() -> dict[str, Link]:
    return {key: Link(id=key, **value) for key, value in _data("links.json")["links"].items()}


def find_model(model_id: str) -> ModelSpec:
    catalog = models()
    if model_id not in catalog:
        raise UsageError(
            f"unknown model {model_id!r}: 'halo plan --list' shows the catalog ids; any other "
            "model by its Hugging Face config.json (halo plan --hf-config FILE, halo bench tp FILE)"
        )
    return catalog[model_id]


def find_hardware(hw_id: str) -> Hardware:
    profiles = hardware_profiles()
    if hw_id not in profiles:
        raise UsageError(f"unknown hardware {hw_id!r}; choose one of {', '.join(profiles)}")
    return profiles[hw_id]


def find_link(link_id: str) -> Link:
    """A link profile id or alias, or a ``halo bench collective`` result file (its α/β fit)."""
    if link_id.endswith(".json"):  # no profile's id is: a file, read as one (or refused)
        return link_from_result(Path(link_id))
    data = _data("links.json")
    resolved = data["aliases"].get(link_id, link_id)
    catalog = links()
    if resolved not in catalog:
        raise UsageError(
            f"unknown link {link_id!r}; choose one of {', '.join([*catalog, *data['aliases']])} "
            "or a bench collective result .json"
        )
    return catalog[resolved]


def link_from_result(path: Path) -> Link:
    """``{"schema": "halo.bench.collective/1", "fit": {"alpha_us": …, "beta_gbps": …}}``."""
    data = read_json_object(path, "a bench collective result")
    require_kind(
        data, "collective", path, " (a bench collective result with fit.alpha_us / fit.beta_gbps)"
    )
    fit = data.get("fit")
    if not isinstance(fit, dict):
        raise UsageError(
            f"{path}: no fit object (fit.alpha_us / fit.beta_gbps); the sweep gave no fit"
        )
    alpha = _number(path, fit, "fit", "alpha_us")
    beta = _number(path, fit, "fit", "beta_gbps")
    if alpha < 0 or beta <= 0:
        raise UsageError(f"{path}: fit must have alpha_us >= 0 and beta_gbps > 0")
    return Link(f"measured:{path.name}", f"measured ({path.name})", alpha, beta, str(path))


def _number(path: Path, obj: dict[str, Any], parent: str, key: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{path}: {parent}.{key} must be a finite number, got {value!r}")
    return float(value)
