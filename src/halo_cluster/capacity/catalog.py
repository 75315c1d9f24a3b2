"""Model, hardware and link profiles (data files in halo_cluster/data, extended by
halo_cluster/capacity/data/models.json), and a link measured by ``halo bench collective``.
A model read from a local ``config.json`` is capacity/hf_config.py's."""

from __future__ import annotations

import json
import math
import re
from importlib import resources
from pathlib import Path
from typing import Any

from halo_cluster.capacity.hf_config import read_json_object
from halo_cluster.capacity.profile import (
    PROFILE_ID,
    hardware_from_profile,
    link_from_profile,
)
from halo_cluster.capacity.spec import STACKS, Hardware, Link, ModelSpec
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


def link_aliases() -> dict[str, str]:
    aliases: dict[str, str] = _data("links.json")["aliases"]
    return aliases


def find_model(model_id: str) -> ModelSpec:
    catalog = models()
    if model_id not in catalog:
        raise UsageError(
            f"unknown model {model_id!r}: 'halo plan --list' shows the catalog ids; any other "
            "model by its Hugging Face config.json (halo plan --hf-config FILE, halo bench tp FILE)"
        )
    return catalog[model_id]


def read_profile(hw_id: str, profiles: Path | None) -> tuple[dict[str, Any], str]:
    """A measured hardware profile: ``lab`` (the one 'halo lab profile' keeps in
    ``profiles``) or a profile file."""
    path = Path(hw_id) if hw_id.endswith(".json") else (profiles or Path()) / f"{hw_id}.json"
    if not hw_id.endswith(".json") and (profiles is None or not path.is_file()):
        raise UsageError(
            f"no {hw_id} profile measured on this machine: run 'halo lab profile' first"
        )
    return read_json_object(path, "a hardware profile"), str(path)


def find_hardware(hw_id: str, profiles: Path | None = None) -> Hardware:
    """A hardware profile by id, or one halo measured (``lab``, or a profile file)."""
    if hw_id == PROFILE_ID or hw_id.endswith(".json"):
        return hardware_from_profile(*read_profile(hw_id, profiles))
    profiles_by_id = hardware_profiles()
    if hw_id not in profiles_by_id:
        raise UsageError(
            f"unknown hardware {hw_id!r}; choose one of {', '.join(profiles_by_id)}, "
            f"{PROFILE_ID} (measured by 'halo lab profile') or a profile .json"
        )
    return profiles_by_id[hw_id]


def find_link(link_id: str, profiles: Path | None = None) -> Link:
    """A link profile id or alias, one's own link (``alpha=70us,bw=5gbit``), or a ``halo
    bench collective`` result file (its α/β fit)."""
    if link_id.endswith(".json"):  # no profile's id is: a file, read as one (or refused)
        return link_from_result(Path(link_id))
    if "=" in link_id:  # no profile's id has one either
        return link_from_spec(link_id)
    if link_id == PROFILE_ID:  # the lab's fabric as 'halo lab profile' measured it
        return link_from_profile(*read_profile(PROFILE_ID, profiles))
    data = _data("links.json")
    resolved = data["aliases"].get(link_id, link_id)
    catalog = links()
    if resolved not in catalog:
        raise UsageError(
            f"unknown link {link_id!r}; choose one of {', '.join([*catalog, *data['aliases']])}, "
            f"your own as {LINK_SPEC}, or a bench collective result .json"
        )
    return catalog[resolved]


_LATENCY = re.compile(r"^(\d+(?:\.\d+)?)(ns|us|µs|ms|s)$")
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit)$")
_LATENCY_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
_RATE_BITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
LINK_SPEC = "alpha=LATENCY,bw=RATE[,stack=tcp|rdma] (e.g. alpha=70us,bw=5gbit)"


def link_from_spec(text: str) -> Link:
    """One's own link: ``alpha=70us,bw=5gbit`` (α: the one-way latency of a small message in
    ns, us, ms or s; β: the sustained rate in bit, kbit, mbit, gbit or tbit per second), and
    optionally ``stack=rdma`` (default tcp)."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip().lower(), value.strip().lower()
        if not sep or key not in ("alpha", "bw", "stack") or key in fields:
            raise UsageError(f"--link {text!r}: use {LINK_SPEC}")
        fields[key] = value
    latency = _LATENCY.match(fields.get("alpha", ""))
    rate = _RATE.match(fields.get("bw", ""))
    stack = fields.get("stack", "tcp")
    if latency is None or rate is None or stack not in STACKS:
        raise UsageError(f"--link {text!r}: use {LINK_SPEC}")
    alpha_us = float(latency.group(1)) * _LATENCY_S[latency.group(2)] * 1e6
    beta_gbps = float(rate.group(1)) * _RATE_BITS[rate.group(2)] / 1e9
    if not 0 <= alpha_us <= 1e6 or not 1e-6 <= beta_gbps <= 1e5:
        raise UsageError(
            f"--link {text!r}: alpha must be at most 1 s and bw between 1 kbit and 100 tbit"
        )
    name = f"alpha={alpha_us:g}us,bw={beta_gbps:g}gbit" + (",stack=rdma" if stack == "rdma" else "")
    return Link(name, f"your link ({name})", alpha_us, beta_gbps, "--link", stack)


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
