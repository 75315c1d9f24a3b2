"""A model read from a local Hugging Face ``config.json`` (Llama, Qwen, Mixtral, DeepSeek,
gpt-oss, Qwen3-Next keys). Bad values are one-line errors that name the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from halo_cluster.bounded.jsonin import load_file
from halo_cluster.capacity.spec import ModelSpec
from halo_cluster.errors import UsageError
from halo_cluster.jsonout import JsonObject

# Hugging Face config keys -> ours (first key present wins)
HF_KEYS: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head"),
    "kv_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
    "intermediate": ("intermediate_size", "ffn_hidden_size"),
    "vocab": ("vocab_size",),
    "tied_embeddings": ("tie_word_embeddings",),
    "experts": ("num_experts", "num_local_experts", "n_routed_experts"),
    "active_experts": ("num_experts_per_tok", "experts_per_token", "moe_topk"),
    "expert_intermediate": ("moe_intermediate_size",),
    "shared_experts": ("n_shared_experts",),
    "shared_expert_intermediate": ("shared_expert_intermediate_size",),
    "dense_layers": ("first_k_dense_replace",),
    "q_lora_rank": ("q_lora_rank",),
    "kv_lora_rank": ("kv_lora_rank",),
    "qk_rope_head_dim": ("qk_rope_head_dim",),
    "qk_nope_head_dim": ("qk_nope_head_dim",),
    "v_head_dim": ("v_head_dim",),
    "full_attention_interval": ("full_attention_interval",),
    "linear_k_heads": ("linear_num_key_heads",),
    "linear_v_heads": ("linear_num_value_heads",),
    "linear_head_dim": ("linear_key_head_dim",),
    "attention_output_gate": ("attn_output_gate",),
    "context_limit": ("max_position_embeddings", "n_positions"),
}
REQUIRED = ("layers", "hidden", "heads", "intermediate", "vocab")
POSITIVE = ("layers", "hidden", "heads", "vocab", "kv_heads", "head_dim")
BOOLS = ("tied_embeddings", "attention_output_gate")
# Far beyond any released model: a larger value is a typo or garbage, not a model.
LIMITS = {
    "layers": 10_000,
    "hidden": 1_000_000,
    "heads": 100_000,
    "kv_heads": 100_000,
    "head_dim": 100_000,
    "intermediate": 10_000_000,
    "vocab": 100_000_000,
    "experts": 1_000_000,
    "active_experts": 1_000_000,
    "expert_intermediate": 10_000_000,
    "shared_expert_intermediate": 10_000_000,
    "context_limit": 1_000_000_000,
}
DEFAULT_LIMIT = 1_000_000
MAX_JSON_BYTES = 16 << 20  # a config.json is a few KiB; a result with its rows, some MiB
MODEL_TYPES_WITH_GATED_ATTENTION = ("qwen3_next",)


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from the regular file ``path`` (at most 16 MiB); an unreadable file, bad
    JSON, a number JSON does not allow (NaN, Infinity) or out of range (1e400, a 400-digit
    integer), or nesting too deep, is one UsageError line naming the file (bounded/jsonin.py)."""
    raw = load_file(path, MAX_JSON_BYTES, what)
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: expected a JSON object ({what})")
    return raw


def model_from_hf_config(path: Path) -> ModelSpec:
    raw = read_json_object(path, "a Hugging Face config.json")
    config = raw
    if isinstance(raw.get("text_config"), dict):
        config = {**raw["text_config"], **raw}
    values = _pick(config)
    missing = [k for k in REQUIRED if k not in values]
    if missing:
        names = ", ".join(HF_KEYS[k][0] for k in missing)
        raise UsageError(f"{path}: missing {names}: is this a decoder model's config.json?")
    for key, value in values.items():
        _check(path, key, value)
    if 0 < values.get("experts", 0) < values.get("active_experts", 0):
        active, experts = _key(config, "active_experts"), _key(config, "experts")
        raise UsageError(
            f"{path}: {active} = {values['active_experts']} is more than the model's "
            f"{values['experts']} experts ({experts}): check the config.json"
        )
    values.setdefault("kv_heads", values["heads"])
    values.setdefault("head_dim", values["hidden"] // values["heads"])
    if values["head_dim"] == 0:
        raise UsageError(f"{path}: head_dim must be > 0 (hidden_size / num_attention_heads is 0)")
    if values.get("experts") and not values.get("expert_intermediate"):
        values["expert_intermediate"] = values["intermediate"]
    if values.get("shared_expert_intermediate") and not values.get("shared_experts"):
        values["shared_experts"] = 1
    gated = config.get("model_type") in MODEL_TYPES_WITH_GATED_ATTENTION
    values["attention_output_gate"] = bool(values.get("attention_output_gate", gated))
    values["tied_embeddings"] = bool(values.get("tied_embeddings", False))
    return ModelSpec(
        id=path.parent.name or path.stem, name=str(config.get("_name_or_path", path)), **values
    )


def _pick(config: dict[str, Any]) -> dict[str, Any]:
    values: JsonObject = {}
    for ours, keys in HF_KEYS.items():
        for key in keys:
            if config.get(key) is not None:
                values[ours] = config[key]
                break
    return values


def _key(config: dict[str, Any], ours: str) -> str:
    """The Hugging Face key a value of ours was read from."""
    return next(key for key in HF_KEYS[ours] if config.get(key) is not None)


def _check(path: Path, key: str, value: Any) -> None:
    name = HF_KEYS[key][0]
    if key in BOOLS:
        if not isinstance(value, bool):
            raise UsageError(f"{path}: {name} must be true or false, got {value!r}")
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise UsageError(f"{path}: {name} must be a whole number >= 0, got {value!r}")
    if key in POSITIVE and value == 0:
        raise UsageError(f"{path}: {name} must be > 0, got 0")
    limit = LIMITS.get(key, DEFAULT_LIMIT)
    if value > limit:
        raise UsageError(f"{path}: {name} = {value} is not a plausible size (limit {limit})")
