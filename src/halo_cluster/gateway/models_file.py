"""What the gateway serves, as halo writes it for the key gate (``halo.gateway_models/1``):
every deployment's name, the aliases it also answers to, its engine and its replicas. The
gate answers ``GET /v1/models`` from it and rewrites an alias to its deployment's name;
``control`` writes it on the head whenever the deployments change."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halo_cluster.bounded.infile import read_text
from halo_cluster.bounded.jsonin import loads
from halo_cluster.errors import StateError
from halo_cluster.jsonout import JsonObject

MODELS_SCHEMA = "halo.gateway_models/1"
MAX_MODELS_BYTES = 1 << 20


@dataclass(frozen=True)
class ModelEntry:
    """One served model: its id, the other names it answers to, its engine, its replicas."""

    id: str
    aliases: tuple[str, ...] = ()
    engine: str = ""
    replicas: int = 1


@dataclass(frozen=True)
class ModelsFile:
    """What halo serves behind the gateway (``halo.gateway_models/1``)."""

    models: tuple[ModelEntry, ...] = ()

    def to_json(self) -> str:
        models = [
            {"id": m.id, "aliases": list(m.aliases), "engine": m.engine, "replicas": m.replicas}
            for m in self.models
        ]
        return json.dumps({"schema": MODELS_SCHEMA, "models": models}, indent=2) + "\n"

    def aliases(self) -> dict[str, str]:
        """alias -> id."""
        return {alias: model.id for model in self.models for alias in model.aliases}

    def names(self) -> list[str]:
        """Every id and alias, each once, in the file's order."""
        found = [name for model in self.models for name in (model.id, *model.aliases)]
        return list(dict.fromkeys(found))

    def openai_list(self) -> JsonObject:
        """The answer to ``GET /v1/models``."""
        entry: JsonObject = {"object": "model", "created": 0, "owned_by": "halo"}
        return {"object": "list", "data": [{"id": n, **entry} for n in self.names()]}


def parse_models(text: str, where: str = "the models file") -> ModelsFile:
    """A models file's content; StateError (one line) when it is not one halo wrote."""
    try:
        data = _json(text)
        if not isinstance(data, dict) or data.get("schema") != MODELS_SCHEMA:
            raise ValueError(f"not a JSON object of schema {MODELS_SCHEMA}")
        items = data.get("models")
        if not isinstance(items, list):
            raise ValueError("'models' is not a list")
        models = ModelsFile(tuple(_model(item) for item in items))
        _no_name_twice(models)
        return models
    except ValueError as err:
        raise StateError(f"{where}: not a models file halo wrote ({err})") from None


def _json(text: str) -> Any:
    try:
        return loads(text)
    except ValueError as err:
        raise ValueError(f"not JSON: {err}") from None


def read_models(path: Path) -> ModelsFile:
    """The models file at ``path``; StateError (one line) when it is missing or garbage."""
    return parse_models(read_text(path, MAX_MODELS_BYTES, "a models file", StateError), str(path))


def _model(item: Any) -> ModelEntry:
    if not isinstance(item, dict):
        raise ValueError("a model that is not an object")
    ident, aliases = item.get("id"), item.get("aliases", [])
    if not isinstance(ident, str) or not ident:
        raise ValueError("a model without an id")
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise ValueError(f"model {ident[:64]!r}: 'aliases' is not a list of names")
    engine, replicas = item.get("engine", ""), item.get("replicas", 1)
    if not isinstance(engine, str):
        raise ValueError(f"model {ident[:64]!r}: 'engine' is not a string")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise ValueError(f"model {ident[:64]!r}: 'replicas' is not a count")
    return ModelEntry(ident, tuple(aliases), engine, replicas)


def _no_name_twice(models: ModelsFile) -> None:
    """An alias names one model, and no alias is another model's id."""
    owner: dict[str, str] = {}
    for model in models.models:
        for name in (model.id, *model.aliases):
            if owner.setdefault(name, model.id) != model.id:
                raise ValueError(f"{name[:64]!r} names two models")
