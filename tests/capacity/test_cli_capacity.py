"""`halo plan` end to end: the JSON contract, the new options, and bad input as one-line
errors with exit code 2 (never a traceback, never NaN in the JSON)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from tests.conftest import halo_here

ROW_KEYS = {
    "layout",
    "tp",
    "pp",
    "link",
    "fits",
    "weights_gib_per_node",
    "kv_gib_per_node",
    "max_context",
    "decode_ms_compute",
    "decode_ms_network",
    "tokens_per_s",
    "network_share",
    "tokens_per_s_batch1",
    "engine",
    "tokens_per_s_low",
    "tokens_per_s_high",
    "weights_source",
    "efficiency_source",
    "replicas",
    "note",
}


halo = halo_here  # the CLI in this process (tests.conftest)


def plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = halo(capsys, "plan", *args, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    return data


def test_json_rows_keep_their_keys_and_add_the_new_ones(capsys: pytest.CaptureFixture[str]) -> None:
    data = plan_json(capsys, "llama-3.3-70b")
    assert all(set(row) == ROW_KEYS for row in data["rows"])
    assert data["recommendation"]["layout"] == "TP2" and data["engine"] == "vllm"
    assert data["weights"] == {
        "source": "catalog",
        "gib": 131.414,
        "note": None,
    }  # 70.55 B × 2 bytes
    assert data["calibration"] is None
    tp2 = data["rows"][0]
    assert (tp2["engine"], tp2["weights_source"]) == ("vllm", "catalog")
    assert tp2["tokens_per_s_low"] < tp2["tokens_per_s"] < tp2["tokens_per_s_high"]


def test_llama_cpp_single_node_and_rpc(capsys: pytest.CaptureFixture[str]) -> None:
    one = plan_json(capsys, "gpt-oss-120b", "--engine", "llama.cpp", "--nodes", "1")
    assert [(r["layout"], r["tp"], r["pp"]) for r in one["rows"]] == [("single", 1, 1)]
    assert one["model"]["quant"] == "MXFP4"  # the release format, as llama.cpp loads it
    rpc = plan_json(capsys, "gpt-oss-120b", "--engine", "llama.cpp", "--nodes", "2")
    assert [(r["layout"], r["tp"], r["pp"], r["link"]) for r in rpc["rows"]] == [
        ("RPC2", 1, 2, "roce-e810"),
        ("2 x single", 1, 1, "roce-e810"),  # two replicas of one node (test_replicas.py)
        ("RPC2", 1, 2, "tcp-e810"),
    ]
    assert rpc["rows"][2]["decode_ms_network"] > rpc["rows"][0]["decode_ms_network"] > 0


def test_quant_and_weights_gib(capsys: pytest.CaptureFixture[str]) -> None:
    q8 = plan_json(
        capsys, "llama-3.3-70b", "--nodes", "1", "--engine", "llama.cpp", "--quant", "q8_0"
    )
    assert q8["model"]["quant"] == "Q8_0" and q8["rows"][0]["weights_source"] == "quant"
    ud = plan_json(
        capsys, "qwen3-235b-a22b", "--nodes", "1", "--engine", "llama.cpp", "--weights-gib", "96.99"
    )
    assert ud["weights"]["source"] == "weights-gib" and ud["weights"]["gib"] == 96.99
    assert ud["model"]["quant"] == "Q4_K_M"  # the engine's assumption for the mix


def test_gguf_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    for key, value in {"block_count": 1, "embedding_length": 64, "attention.head_count": 4}.items():
        writer.add_uint32(f"llama.{key}", value)
    writer.add_uint32("llama.vocab_size", 10)
    writer.add_tensor("token_embd.weight", np.zeros((10, 64), dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((64, 64), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    data = plan_json(capsys, "--gguf", str(path), "--engine", "llama.cpp", "--nodes", "1")
    assert data["model"]["id"] == "tiny.gguf"
    assert data["weights"] == {
        "source": "gguf",
        "gib": round((10 * 64 * 4 + 64 * 64 * 2) / 2**30, 3),
        "note": "exact tensor sizes from 1 file(s)",
    }


def test_calibrate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = tmp_path / "serve.json"
    level = {
        "concurrency": 1,
        "errors": 0,
        "output_tokens_per_s": 40.0,
        "itl_ms": {"p50": 24.0, "p90": 26.0},
    }
    result.write_text(
        json.dumps(
            {
                "schema": "halo.bench.serve/1",
                "model": "gpt-oss",
                "created": "2026-05-02T08:00:00+00:00",
                "input_len": 256,
                "output_len": 256,
                "levels": [level],
            }
        )
    )
    data = plan_json(
        capsys, "gpt-oss-120b", "--nodes", "1", "--engine", "llama.cpp", "--calibrate", str(result)
    )
    assert data["calibration"] == "calibrated from serve.json (2026-05-02T08:00:00+00:00, gpt-oss)"
    assert data["rows"][0]["efficiency_source"] == data["calibration"]


def test_text_output_shows_the_range(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = halo(capsys, "plan", "gpt-oss-120b", "--engine", "llama.cpp", "--nodes", "1")
    assert code == 0
    assert "tok/s (range)" in out and "efficiency: median of" in out and "weights: catalog" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("llama-3.1-8b", "--memory-gib", "inf"),
            "--memory-gib must be a finite number > 0, got inf",
        ),
        (
            ("llama-3.1-8b", "--memory-gib", "nan"),
            "--memory-gib must be a finite number > 0, got nan",
        ),
        (
            ("llama-3.1-8b", "--memory-bw-gbs", "0"),
            "--memory-bw-gbs must be a finite number > 0, got 0.0",
        ),
        (
            ("llama-3.1-8b", "--memory-bw-gbs", "-5"),
            "--memory-bw-gbs must be a finite number > 0, got -5.0",
        ),
        (("llama-3.1-8b", "--weights-gib", "0"), "--weights-gib must be a finite number > 0"),
        (("llama-3.1-8b", "--weights-gib", "1e9"), "is not a plausible model size"),
        (("llama-3.1-8b", "--quant", "Q9_K"), "unknown quantisation 'Q9_K'"),
        (("no-such-model",), "unknown model 'no-such-model'"),
        ((), "name a MODEL"),
    ],
)
def test_bad_options(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    code, out, err = halo(capsys, "plan", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("option", "content", "message"),
    [
        (
            "--link",
            {"schema": "halo.bench.serve/1"},
            "schema is 'halo.bench.serve/1', expected 'halo.bench.collective/1'",
        ),
        (
            "--link",
            {
                "schema": "halo.bench.collective/1",
                "fit": {"alpha_us": float("nan"), "beta_gbps": 9},
            },
            "not JSON (NaN is not a number JSON allows)",
        ),
        ("--calibrate", {"schema": "halo.bench.collective/1"}, "expected 'halo.bench.serve/1'"),
        (
            "--hf-config",
            {
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 0,
                "intermediate_size": 8,
                "vocab_size": 9,
            },
            "num_attention_heads must be > 0",
        ),
        (
            "--hf-config",
            {
                "num_hidden_layers": "2",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "intermediate_size": 8,
                "vocab_size": 9,
            },
            "num_hidden_layers must be a whole number >= 0, got '2'",
        ),
        (
            "--hf-config",
            {
                "num_hidden_layers": 2,
                "hidden_size": float("inf"),
                "num_attention_heads": 4,
                "intermediate_size": 8,
                "vocab_size": 9,
            },
            "not JSON (Infinity is not a number JSON allows)",
        ),
        (
            "--hf-config",
            {
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "intermediate_size": 8,
                "vocab_size": 10**12,
            },
            "vocab_size = 1000000000000 is not a plausible size",
        ),
        ("--gguf", "GGUF\x63\x00\x00\x00" + "\x00" * 16, "unknown GGUF version 99"),
        ("--gguf", "not a model", "not a GGUF file"),
    ],
)
def test_bad_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, content: object, message: str
) -> None:
    path = tmp_path / "input.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    model = () if option in ("--hf-config", "--gguf") else ("llama-3.1-8b",)
    code, out, err = halo(capsys, "plan", *model, option, str(path), "--json")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and str(path) in err and message in err


def test_help_imports_neither_gguf_nor_numpy() -> None:
    code = (
        "import sys; from halo_cluster.cli import main\n"
        "for args in (['--help'], ['plan', '--help']):\n"
        "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
        "print('HEAVY', sorted({'gguf', 'numpy'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "--gguf" in out and "HEAVY []" in out
