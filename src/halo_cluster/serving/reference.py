"""The token witness's one-node references and how a served layout is asked for its answers.

A reference is the greedy answers of one engine serving one model on one node, to fixed
prompts (``PROMPTS``), with each step's likeliest tokens. It is kept beside the state file
(``<config dir>/.halo/<cluster>.tokens.json``, schema ``halo.tokens/1``), one per engine and
model, written atomically; it holds no secrets. ``halo serve --reference record`` (on one
node), ``halo tune`` and ``halo run`` record it; every later start of a layout of the same
engine and model is compared with it (``witness.tokens``).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halo_cluster.atomic import atomic_write
from halo_cluster.bounded.infile import read_text
from halo_cluster.bounded.jsonin import loads
from halo_cluster.client.node import NodeClient
from halo_cluster.config import Config, ServeConfig, secret
from halo_cluster.engines import scripts
from halo_cluster.errors import LifecycleError, ParseError, StateError, WireError
from halo_cluster.jsonout import JsonObject
from halo_cluster.wire.answers import TokenAnswer, parse_serve_tokens, token_answer_from_dict
from halo_cluster.wire.args import serve_tokens_args
from halo_cluster.wire.commands import SERVE_KEY_ENV

SCHEMA = "halo.tokens/1"
MAX_BYTES = 8 << 20
# Plain prompts of different kinds (prose, a list, code, arithmetic): a wrong split of the
# model shows on each, a near tie rarely on all.
PROMPTS = (
    "The capital of France is",
    "Here are three facts about the ocean:\n1.",
    "def fibonacci(n):\n    ",
    "Question: what is 17 times 3?\nAnswer:",
)
TOKENS = 32  # per prompt
TOP = 5  # the likeliest tokens kept per step
SHORT_PROMPTS = 2  # 'halo serve' compares the first prompts only


@dataclass(frozen=True)
class Reference:
    """One engine and model's one-node answers."""

    engine: str
    model: str
    layout: str  # the layout it was recorded on, e.g. "vllm tp1 on node1"
    node: str
    prompts: tuple[str, ...]
    tokens: int
    answers: tuple[TokenAnswer, ...]
    recorded_at: float

    def to_dict(self) -> JsonObject:
        return {
            "engine": self.engine,
            "model": self.model,
            "layout": self.layout,
            "node": self.node,
            "prompts": list(self.prompts),
            "tokens": self.tokens,
            "answers": [a.to_dict() for a in self.answers],
            "recorded_at": self.recorded_at,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Reference:
        if not isinstance(data, dict):
            raise ValueError("a reference is not an object")
        prompts = data["prompts"]
        answers = data["answers"]
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise ValueError("prompts is not a list of strings")
        if not isinstance(answers, list) or len(answers) != len(prompts):
            raise ValueError("answers is not one per prompt")
        return cls(
            engine=str(data["engine"]),
            model=str(data["model"]),
            layout=str(data["layout"]),
            node=str(data["node"]),
            prompts=tuple(prompts),
            tokens=int(data["tokens"]),
            answers=tuple(
                token_answer_from_dict(SCHEMA, a, f"answers[{i}]") for i, a in enumerate(answers)
            ),
            recorded_at=float(data["recorded_at"]),
        )


def reference_path(config: Config) -> Path:
    return config.path.parent / ".halo" / f"{config.name}.tokens.json"


def key(engine: str, model: str) -> str:
    return f"{engine} {model}"


def read_references(config: Config) -> dict[str, Reference]:
    """Every recorded reference ({} when there is no file); garbage is one StateError."""
    path = reference_path(config)
    if not os.path.lexists(path):
        return {}
    text = read_text(path, MAX_BYTES, "a halo token reference file", StateError)
    try:
        data = loads(text)
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"its schema is not {SCHEMA}")
        found = data.get("references")
        if not isinstance(found, dict):
            raise ValueError("no references")
        return {str(k): Reference.from_dict(v) for k, v in found.items()}
    except (ValueError, KeyError, TypeError, ParseError) as err:
        raise StateError(
            f"{path}: not a {SCHEMA} file halo can read ({str(err)[:160]}): remove it and "
            "record the reference again ('halo serve MODEL --nodes 1 --reference record')"
        ) from None


def find_reference(config: Config, engine: str, model: str) -> Reference | None:
    return read_references(config).get(key(engine, model))


def save_reference(config: Config, reference: Reference) -> None:
    """Add (or replace) one engine and model's reference; the others are kept."""
    found = read_references(config)
    found[key(reference.engine, reference.model)] = reference
    path = reference_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"schema": SCHEMA, "references": {k: r.to_dict() for k, r in found.items()}}
    atomic_write(path, json.dumps(body, indent=1), prefix=".tokens.")


def ask(
    head: NodeClient, serve: ServeConfig, prompts: tuple[str, ...], tokens: int
) -> tuple[TokenAnswer, ...]:
    """The served layout's greedy answers to ``prompts``, asked on the head (a server bound
    to its loopback is reached too)."""
    args = serve_tokens_args(scripts.local_host(serve.host), serve.port, prompts, tokens, TOP)
    env = {SERVE_KEY_ENV: secret(serve.api_key_env) or ""}
    result = head.call(*args, env=env, timeout=120 + 30 * len(prompts))
    if not result.ok:
        raise LifecycleError(f"the token witness's requests failed: {result.error_text()}")
    try:
        return parse_serve_tokens(result.stdout).answers
    except WireError as err:
        raise LifecycleError(f"the token witness: {err}") from None


def record(
    head: NodeClient, serve: ServeConfig, engine: str, model: str, layout: str, node: str
) -> Reference:
    """The served one-node layout's answers to every prompt, as a reference."""
    answers = ask(head, serve, PROMPTS, TOKENS)
    return Reference(engine, model, layout, node, PROMPTS, TOKENS, answers, time.time())
