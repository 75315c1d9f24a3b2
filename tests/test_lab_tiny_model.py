"""halo lab model: a tiny Llama checkpoint written offline, checked as a loader reads it."""

from __future__ import annotations

import itertools
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from halo_cluster.lab.tiny_model import write_model
from halo_cluster.lab.tiny_spec import TinyModelSpec

FILES = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
]
SMALL = TinyModelSpec(layers=1, hidden=64, heads=2, kv_heads=1, vocab=512)


def halo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "halo_cluster", "lab", "model", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def default_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The default model, written once by the command as a user runs it."""
    path = tmp_path_factory.mktemp("lab-model") / "tiny"
    result = halo(str(path), "--json")
    assert result.returncode == 0, result.stderr
    return path, json.loads(result.stdout)


def read_header(path: Path) -> tuple[int, dict[str, Any]]:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    return length, json.loads(data[8 : 8 + length])


def bf16_values(path: Path, name: str, count: int) -> list[float]:
    length, header = read_header(path)
    start = 8 + length + header[name]["data_offsets"][0]
    raw = path.read_bytes()[start : start + 2 * count]
    return [
        struct.unpack("<f", struct.pack("<I", h << 16))[0] for (h,) in struct.iter_unpack("<H", raw)
    ]


def test_config_is_llama_for_causal_lm(default_model: tuple[Path, dict[str, Any]]) -> None:
    path, _ = default_model
    assert json.loads((path / "config.json").read_text()) == {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "dtype": "bfloat16",
        "eos_token_id": 2,
        "head_dim": 32,
        "hidden_act": "silu",
        "hidden_size": 256,
        "initializer_range": 0.02,
        "intermediate_size": 512,
        "max_position_embeddings": 2048,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": 8,
        "num_hidden_layers": 4,
        "num_key_value_heads": 4,
        "pad_token_id": 3,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": 4096,
    }
    assert json.loads((path / "generation_config.json").read_text()) == {
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 3,
    }


def test_json_summary(default_model: tuple[Path, dict[str, Any]]) -> None:
    path, summary = default_model
    sizes = {name: (path / name).stat().st_size for name in FILES}
    assert summary == {
        "dir": str(path.resolve()),
        "architecture": "LlamaForCausalLM",
        "layers": 4,
        "hidden": 256,
        "heads": 8,
        "kv_heads": 4,
        "head_dim": 32,
        "intermediate": 512,
        "vocab": 4096,
        "max_position_embeddings": 2048,
        "dtype": "bfloat16",
        "seed": 0,
        "parameters": 4_458_752,
        "bytes": sum(sizes.values()),
        "files": sizes,
    }
    assert sorted(p.name for p in path.iterdir()) == FILES


def test_tensor_names_shapes_and_layout(default_model: tuple[Path, dict[str, Any]]) -> None:
    path, _ = default_model
    length, header = read_header(path / "model.safetensors")
    assert length % 8 == 0
    assert header.pop("__metadata__") == {"format": "pt"}
    expected = {
        "model.embed_tokens.weight": [4096, 256],
        "model.norm.weight": [256],
        "lm_head.weight": [4096, 256],
    }
    for n in range(4):
        expected |= {
            f"model.layers.{n}.input_layernorm.weight": [256],
            f"model.layers.{n}.post_attention_layernorm.weight": [256],
            f"model.layers.{n}.self_attn.q_proj.weight": [256, 256],
            f"model.layers.{n}.self_attn.k_proj.weight": [128, 256],
            f"model.layers.{n}.self_attn.v_proj.weight": [128, 256],
            f"model.layers.{n}.self_attn.o_proj.weight": [256, 256],
            f"model.layers.{n}.mlp.gate_proj.weight": [512, 256],
            f"model.layers.{n}.mlp.up_proj.weight": [512, 256],
            f"model.layers.{n}.mlp.down_proj.weight": [256, 512],
        }
    assert {name: t["shape"] for name, t in header.items()} == expected
    assert {t["dtype"] for t in header.values()} == {"BF16"}
    spans = sorted(t["data_offsets"] for t in header.values())
    assert spans[0][0] == 0
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert (path / "model.safetensors").stat().st_size == 8 + length + spans[-1][1]


def test_weight_values(default_model: tuple[Path, dict[str, Any]]) -> None:
    weights = default_model[0] / "model.safetensors"
    assert set(bf16_values(weights, "model.layers.2.input_layernorm.weight", 256)) == {1.0}
    values = bf16_values(weights, "model.embed_tokens.weight", 4096)
    std = (sum(v * v for v in values) / len(values)) ** 0.5
    assert 0.018 < std < 0.022 and len(set(values)) > 100


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    one = write_model(tmp_path / "one", SMALL)
    two = write_model(tmp_path / "two", SMALL)
    other = write_model(tmp_path / "other", TinyModelSpec(1, 64, 2, 1, 512, seed=1))
    assert one.files == two.files == other.files
    for name in FILES:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    weights = [(tmp_path / d / "model.safetensors").read_bytes() for d in ("one", "other")]
    assert weights[0] != weights[1]


def test_tokenizer_round_trips(default_model: tuple[Path, dict[str, Any]]) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(default_model[0] / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == 4096
    assert [tokenizer.token_to_id(t) for t in ("<unk>", "<s>", "</s>", "<pad>")] == [0, 1, 2, 3]
    text = "Hello, world! The cluster runs 42 tokens per second. Ünïcode ✓"
    encoding = tokenizer.encode(text)
    assert encoding.ids[0] == 1 and 1 not in encoding.ids[1:]
    assert tokenizer.decode(encoding.ids) == text
    assert len(tokenizer.encode("The cluster").ids) == 3  # trained: common words are tokens


TRANSFORMERS_CHECK = """
import json, sys
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
ids = tokenizer("a small model")["input_ids"]
chat = tokenizer.apply_chat_template(
    [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
)
print(json.dumps({
    "size": len(tokenizer),
    "special": [tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id],
    "first": ids[0],
    "decoded": tokenizer.decode(ids, skip_special_tokens=True),
    "chat": chat,
}))
"""


def test_tokenizer_loads_with_transformers(default_model: tuple[Path, dict[str, Any]]) -> None:
    """With the transformers vLLM uses: the engine environment's Python (make engine)."""
    from halo_cluster.config import default_engine
    from tests.conftest import require

    engine = default_engine()
    require(engine is not None, "no engine environment (make engine builds .venv-engine)")
    done = subprocess.run(
        [f"{engine}/bin/python", "-c", TRANSFORMERS_CHECK, str(default_model[0])],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "size": 4096,
        "special": [1, 2, 3],
        "first": 1,
        "decoded": "a small model",
        "chat": "<s><|user|>\nHi</s>\n<|assistant|>\n",
    }


def test_human_output_and_other_sizes(tmp_path: Path) -> None:
    sizes = ["--layers", "1", "--hidden", "64", "--heads", "2", "--kv-heads", "2", "--vocab", "512"]
    result = halo(str(tmp_path / "m"), *sizes)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"wrote {(tmp_path / 'm').resolve()}: ")
    assert "LlamaForCausalLM, 106.7 k parameters, " in lines[0] and "KiB in 6 files" in lines[0]
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert (config["num_hidden_layers"], config["head_dim"], config["vocab_size"]) == (1, 32, 512)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--heads", "3"], "halo: error: --heads 3 must divide --hidden 256"),
        (["--kv-heads", "3"], "halo: error: --kv-heads 3 must divide --heads 8"),
        (["--heads", "16"], "halo: error: head size --hidden/--heads = 16 is not one vLLM"),
        (["--layers", "0"], "Error: Invalid value for '--layers': 0 is not in the range"),
        (["--vocab", "100"], "Error: Invalid value for '--vocab': 100 is not in the range"),
        (["--hidden", "big"], "Error: Invalid value for '--hidden': 'big' is not a valid"),
    ],
)
def test_bad_options_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    result = halo(str(tmp_path / "m"), *args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "rror: " in line]
    assert len(errors) == 1 and errors[0].startswith(message), result.stderr
    assert not (tmp_path / "m").exists()


def test_non_empty_dir_refused_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    result = halo(str(tmp_path))
    assert result.returncode == 2
    assert result.stderr == f"halo: error: {tmp_path} is not empty (use --force to write into it)\n"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    write_model(tmp_path, SMALL, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*FILES, "notes.txt"])


def test_file_is_not_a_directory(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("")
    result = halo(str(target))
    assert (result.returncode, result.stderr) == (
        2,
        f"halo: error: {target} exists and is not a directory\n",
    )


def test_importing_the_command_imports_nothing_heavy() -> None:
    code = (
        "import sys, halo_cluster.cli.lab, halo_cluster.lab.tiny_model\n"
        "print(sorted({'torch', 'tokenizers', 'safetensors'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "[]\n"


def test_missing_packages_name_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from halo_cluster.errors import UsageError

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tokenizers" else real(name)
    )
    with pytest.raises(UsageError, match=r"needs tokenizers: pip install 'halo-cluster\[lab\]'"):
        write_model(tmp_path / "m", SMALL)
    assert not (tmp_path / "m").exists()
