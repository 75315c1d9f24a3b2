"""Hardening: secrets and sources. A URL's credentials (userinfo, ``?token=``) never reach a
result file, JSON or the terminal; a Hugging Face snapshot that holds ``.gitattributes``
(nearly every repository) syncs what the engine reads and says what it left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.bench.results import stamp
from halo_cluster.bounded.redact import MASK, redact_url
from halo_cluster.errors import ModelError
from halo_cluster.modelstore.manifest import HashCache, make_manifest
from halo_cluster.modelstore.transfer import PipeSpec, parse_pipe_spec
from tests.bench.fake_openai import FakeOpenAI, serving
from tests.bench.test_serve_load import bench
from tests.models.test_model_source import COMMIT, _hub_cache, _resolve


# -- URLs ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("given_url", "shown"),
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("http://user:pass@host:8000/v1", "http://***@host:8000/v1"),
        ("https://tok3n@host/v1", "https://***@host/v1"),
        ("http://u:p@ss@host/", "http://***@host/"),
        ("http://host/v1?token=abc", "http://host/v1?token=***"),
        (
            "http://host/v1?model=x&api_key=k&X-Amz-Signature=s&page=2#top",
            "http://host/v1?model=x&api_key=***&X-Amz-Signature=***&page=2#top",
        ),
        (
            "http://host/v1?access_token=a&password=b&auth=c",
            "http://host/v1?access_token=***&password=***&auth=***",
        ),
        ("http://host/a@b?x=1", "http://host/a@b?x=1"),  # an '@' in the path is no userinfo
        ("user:pass@host:8000/v1", "***@host:8000/v1"),
        ("http://[::1]:8000/v1?token=", "http://[::1]:8000/v1?token="),
        ("", ""),
    ],
)
def test_a_url_keeps_where_it_went_and_loses_its_credentials(given_url: str, shown: str) -> None:
    assert redact_url(given_url) == shown
    assert redact_url(shown) == shown  # redacting twice changes nothing


SECRET = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=12, max_size=24)


@given(SECRET, SECRET, SECRET, st.sampled_from(["token", "api_key", "key", "secret", "sig"]))
def test_no_secret_survives_in_any_part(user: str, password: str, token: str, name: str) -> None:
    url = f"https://{user}:{password}@example.com:8443/v1/x?{name}={token}&n=1"
    shown = redact_url(url)
    assert user not in shown and password not in shown and token not in shown
    assert shown == f"https://{MASK}@example.com:8443/v1/x?{name}={MASK}&n=1"


def test_a_result_stamped_keeps_no_credentials() -> None:
    stamped = stamp({"schema": "halo.bench.serve/1", "url": "http://u:hunter2@h/?token=t0k"}, None)
    assert stamped["url"] == "http://***@h/?token=***"


def test_bench_serve_writes_and_prints_no_credentials(tmp_path: Path) -> None:
    """`halo bench serve --url http://user:pass@host/...?token=` stored the URL verbatim in
    the result and printed it: the file, the JSON and the table show it redacted."""
    fake = FakeOpenAI("tiny", token_delay_s=0.0)
    with serving(fake) as port:
        url = f"http://alice:hunter2secret@127.0.0.1:{port}/?token=t0ps3cr3t&n=1"
        common = ("--url", url, "--concurrency", "1", "--prompts", "2", "--input-len", "8")
        shape = ("--output-len", "2", "--warmup", "0")
        as_json = bench(*common, *shape, "--out", str(tmp_path / "a.json"), "--json")
        table = bench(*common, *shape, "--out", str(tmp_path / "b.json"))
    assert as_json.returncode == 0, as_json.stderr
    assert table.returncode == 0, table.stderr
    shown = f"http://***@127.0.0.1:{port}/?token=***&n=1"
    assert json.loads(as_json.stdout)["url"] == shown
    assert json.loads((tmp_path / "a.json").read_text())["url"] == shown
    for text in (
        as_json.stdout, as_json.stderr, table.stdout, table.stderr,
        (tmp_path / "a.json").read_text(), (tmp_path / "b.json").read_text(),
    ):  # fmt: skip
        assert "hunter2secret" not in text and "t0ps3cr3t" not in text and "alice" not in text


# -- a Hugging Face snapshot with .gitattributes ---------------------------------------------
def test_a_snapshot_with_gitattributes_syncs_what_the_engine_reads(tmp_path: Path) -> None:
    """The manifest named `.gitattributes`, a path every node's store refuses (hidden): every
    node failed its spec. It is left out, said so, and the spec a node reads is accepted."""
    pytest.importorskip("huggingface_hub")
    files = {
        ".gitattributes": b"*.safetensors filter=lfs\n",
        ".github/workflow.yml": b"x",
        "config.json": b'{"a": 1}',
        "model.safetensors": b"weights" * 10,
    }
    cache = _hub_cache(tmp_path / "hub", "org/tiny", files)
    done = _resolve(cache, "org/tiny", tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [f["path"] for f in data["manifest"]["files"]] == ["config.json", "model.safetensors"]
    assert sorted(data["files"]) == ["config.json", "model.safetensors"]
    assert data["left_out"] == [".gitattributes", ".github/workflow.yml"]
    assert data["manifest"]["source"] == f"hf:org/tiny@{COMMIT}"
    from halo_cluster.modelstore.manifest import manifest_from

    manifest = manifest_from(data["manifest"])
    spec = PipeSpec("run1", "/s", True, manifest, (), {}, listen="ssh", secret="t" * 64)
    assert parse_pipe_spec(spec.to_json()) == spec  # what the node does with it


def test_a_sync_result_says_what_was_left_out(tmp_path: Path) -> None:
    from halo_cluster.models.sync import SyncResult

    (tmp_path / "c").write_text("{}")
    manifest = make_manifest("m", [("c", str(tmp_path / "c"))], "", "hf:o/m@x", HashCache(None))
    result = SyncResult("m", manifest, "hf:o/m@x", {}, left_out=(".gitattributes",))
    assert result.to_dict()["left_out"] == [".gitattributes"]


def test_a_manifest_never_names_a_path_a_store_refuses(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("x")
    with pytest.raises(ModelError, match=r"'\.gitattributes': a name halo cannot store"):
        make_manifest("m", [(".gitattributes", str(tmp_path / "a"))], "", "s", HashCache(None))
