"""The preflight's memory check (serving/memory.py) as data: each member's need against its
available memory, the one line that refuses, and llama.cpp's KV cache from a real GGUF."""

from __future__ import annotations

from pathlib import Path

import pytest

from halo_cluster.checks.memory_owners import MemoryOwner, how_to_stop, parse_owners
from halo_cluster.config import ServeConfig
from halo_cluster.engines.llama_cpp import FIT_MIN_CTX, kv_tokens, local_model
from halo_cluster.engines.protocol import ModelMemory
from halo_cluster.lab.tiny_model import write_model
from halo_cluster.lab.tiny_spec import TinyModelSpec
from halo_cluster.serving.memory import GIB, NodeMemory, per_node, refusal
from tests.conftest import OUTPUTS

MEMORY = ModelMemory({"n1": 0.6, "n2": 0.4}, {"n1": 0.6 * GIB, "n2": 0.4 * GIB}, "KV for 4096")


def answer(available_gib: float) -> str:
    return f"mem_total_kib=1\nmem_available_kib={int(available_gib * GIB) // 1024}\n"


def test_each_member_needs_its_share_and_its_kv() -> None:
    rows = per_node(MEMORY, {"n1": answer(8.0), "n2": answer(2.0)}, 5 * GIB)
    assert rows == [
        NodeMemory("n1", 8 * GIB, 3 * GIB, 0.6 * GIB, 1024),
        NodeMemory("n2", 2 * GIB, 2 * GIB, 0.4 * GIB, 1024),
    ]
    assert [r.short for r in rows] == [False, True]
    assert rows[1].to_dict() == {
        "available_gib": 2.0, "weights_gib": 2.0, "kv_gib": 0.4, "need_gib": 2.4, "owners": [],
        "page_cache": {"dropped": False, "before_gib": None, "cached_gib": None},
    }  # fmt: skip
    assert refusal(rows, MEMORY.kv_note) == (
        "not enough memory: n2 has 2.00 GiB available, the model needs 2.40 GiB there "
        "(2.00 GiB of weights + 0.40 GiB of KV cache) (KV for 4096): free memory there, lower "
        "max_model_len, spread the model over more nodes ('halo plan'), or --force"
    )


def test_the_models_pages_still_cached_after_the_drop_count_as_taken() -> None:
    """On a unified-memory node the model's pages were dropped from the page cache before
    the start; what the kernel kept (dirty, or mapped by someone) is memory the load cannot
    have, and the refusal says so."""
    dropped = f"dropped=1\ncached_before={3 * GIB}\ncached_bytes={GIB}\n"
    rows = per_node(MEMORY, {"n1": answer(8.0), "n2": dropped + answer(3.0)}, 5 * GIB)
    assert [(r.dropped, r.usable_bytes, r.short) for r in rows] == [
        (False, 8 * GIB, False),
        (True, 2 * GIB, True),
    ]
    assert rows[1].cache_line() == (
        "n2: 2.00 GiB of the model's pages dropped, 1.00 GiB still cached (counted as taken)"
    )
    assert rows[0].cache_line() is None
    assert refusal(rows, "").startswith(
        "not enough memory: n2 has 3.00 GiB available (1.00 GiB of it the model's pages still "
        "cached), the model needs 2.40 GiB there"
    )
    uncounted = per_node(MEMORY, {"n1": "dropped=1\n" + answer(8.0)}, 5 * GIB)[0]
    assert uncounted.cache_line() == "n1: the model's pages dropped (no fincore there: not counted)"


def test_other_deployments_on_a_node_count_against_its_whole_memory() -> None:
    """A model that mmaps its weights leaves them in MemAvailable: what other deployments
    were checked to need on the node is counted against its MemTotal."""
    said = "mem_total_kib=8388608\nmem_available_kib=7340032\n"  # 8 GiB, 7 available
    rows = per_node(MEMORY, {"n1": said, "n2": said}, 5 * GIB, {"n1": 5.0 * GIB})
    assert [(r.short, r.over_total) for r in rows] == [(False, True), (False, False)]
    assert refusal(rows, "") == (
        "not enough memory: n1 has 8.00 GiB, other deployments hold 5.00 GiB of it (3.00 GiB "
        "free), the model needs 3.60 GiB there (3.00 GiB of weights + 0.60 GiB of KV cache): "
        "free memory there, lower max_model_len, spread the model over more nodes "
        "('halo plan'), or --force"
    )
    alone = per_node(MEMORY, {"n1": said, "n2": said}, 5 * GIB, {"n1": 4.0 * GIB})
    assert refusal(alone, "") == ""


def test_what_cannot_be_read_is_never_refused_on_a_guess() -> None:
    unread = per_node(MEMORY, {"n1": "garbage\n", "n2": "mem_available_kib=-5\n"}, 5 * GIB)
    assert [(r.available_bytes, r.short) for r in unread] == [(None, False), (None, False)]
    no_size = per_node(MEMORY, {"n1": answer(0.1), "n2": answer(0.1)}, None)
    assert [(r.need_bytes, r.short) for r in no_size] == [(None, False), (None, False)]
    assert refusal(unread + no_size, "") == ""


def test_llama_cpp_holds_its_context_or_the_fit_floor() -> None:
    assert kv_tokens(ServeConfig(max_model_len=2048, max_num_seqs=2), 8192) == (
        4096, "KV for 2 x 2048 tokens"
    )  # fmt: skip
    assert kv_tokens(ServeConfig(), 131072) == (
        FIT_MIN_CTX, f"KV for at least {FIT_MIN_CTX} tokens (llama.cpp fits an unset context)"
    )  # fmt: skip
    assert kv_tokens(ServeConfig(), 512)[0] == 512  # a model trained on less holds less
    assert kv_tokens(ServeConfig(), None)[0] == FIT_MIN_CTX


def test_a_local_gguf_gives_exact_weights_and_its_kv_per_token(tmp_path: Path) -> None:
    spec = TinyModelSpec(layers=2, hidden=64, heads=2, kv_heads=1, vocab=512)
    write_model(tmp_path, spec, formats=("gguf",))
    found = local_model(str(tmp_path / "model.gguf"))
    assert found is not None and found.spec.layers == 2
    size = (tmp_path / "model.gguf").stat().st_size
    assert 0.9 * size < found.weights.total <= size  # the tensors, not the header
    from halo_cluster.capacity.estimate import kv_bytes_per_token

    # K and V, f16, one KV head of 32 per layer, 2 layers
    assert kv_bytes_per_token(found.spec, 1, 1, "fp16") == 2 * 2 * 1 * 32 * 2
    assert local_model(str(tmp_path / "absent.gguf")) is None


# -- who holds the memory (issue 47, item 4) ---------------------------------------------------
RECORDED = (OUTPUTS / "memory-owners" / "lab-host-vllm.txt").read_text()


def test_the_recorded_answer_names_its_largest_processes() -> None:
    """This machine's answer while the suite ran a vLLM lab beside it: the 8 largest by RSS,
    none in a process group halo keeps a pid file for here, no GPU memory (no GPU)."""
    owners = parse_owners(RECORDED)
    assert len(owners) == 8 and all(not o.halo and o.gtt_kib == 0 for o in owners)
    assert owners == sorted(owners, key=lambda o: o.rss_kib, reverse=True)
    assert owners[0].command == "vllm" and owners[0].rss_kib == 636396


def test_a_foreign_owner_of_a_large_share_refuses_with_how_to_stop_it() -> None:
    """A second llama-server holds 96 GiB of a 128 GB node, most of it GPU memory in GTT
    (not in its RSS): named, with how to stop it; halo's own engine is never named."""
    total = 125 * 2**20  # KiB: MemTotal of a 128 GB Strix Halo with a 512 MiB carve-out
    said = (
        f"mem_total_kib={total}\nmem_available_kib={total - 100 * 2**20}\n"
        f"owner=4242 4240 {2 * 2**20} {94 * 2**20} other llama-server\n"
        f"owner=5151 5151 {1 * 2**20} {30 * 2**20} halo vllm\n"
        "owner=x 1 2 3 other broken\nowner=1 1 1 1 maybe what\nowner=² 1 1 1 other odd\n"
    )
    memory = ModelMemory({"n1": 1.0}, {"n1": 1.0 * GIB}, "")
    rows = per_node(memory, {"n1": said}, 20 * GIB)
    assert [o.pid for o in rows[0].owners] == [4242, 5151]  # the garbage lines left out
    assert rows[0].to_dict()["owners"] == [
        {"pid": 4242, "command": "llama-server", "rss_gib": 2.0, "gtt_gib": 94.0, "halo": False}
    ]
    assert refusal(rows, "") == (
        "memory held by another owner: n1: pid 4242 (llama-server) holds 96.0 GiB (77 %, 94.0 "
        "GiB of it GPU memory (GTT)), not halo's: stop it with kill -TERM 4242; or --force to "
        "start beside it"
    )
    short = per_node(memory, {"n1": said}, 40 * GIB)
    assert refusal(short, "").startswith(
        "not enough memory: n1 has 25.00 GiB available, the model needs 41.00 GiB there "
        "(40.00 GiB of weights + 1.00 GiB of KV cache) (pid 4242 (llama-server) holds"
    )


def test_ray_is_named_where_memory_is_short_but_never_refuses_alone() -> None:
    """Ray's processes may be halo's own (Ray from 'halo up' holds another deployment's
    ranks as actors; ps names them ray::RayWorkerW): no pid file of halo's says so."""
    total = 125 * 2**20
    said = (
        f"mem_total_kib={total}\nmem_available_kib={total - 100 * 2**20}\n"
        f"owner=4242 4240 {2 * 2**20} {94 * 2**20} other ray::RayWorkerW\n"
    )
    memory = ModelMemory({"n1": 1.0}, {"n1": 1.0 * GIB}, "")
    assert refusal(per_node(memory, {"n1": said}, 20 * GIB), "") == ""
    assert "stop it with halo down (Ray from halo up), or ray stop" in refusal(
        per_node(memory, {"n1": said}, 40 * GIB), ""
    )


def test_any_other_owner_is_stopped_by_its_pid() -> None:
    other = MemoryOwner(77, 70, 4 * 2**20, 0, False, "python3")
    assert how_to_stop(other) == "kill -TERM 77"


def test_the_memory_script_drops_a_real_models_pages_and_counts_what_stays(
    tmp_path: Path,
) -> None:
    """Run for real on this machine's disk (not tmpfs, where pages cannot be dropped): a
    model directory read into the page cache, one file behind a link as a Hugging Face
    cache has them; after the script, fincore counts none of its pages."""
    import os
    import shutil
    import subprocess

    from halo_cluster.engines.scripts import memory_script
    from halo_cluster.supervision import key_values
    from tests.needs import require

    require(shutil.which("fincore") is not None, "util-linux's fincore")
    disk = Path(__file__).resolve().parents[2] / "build"  # the checkout's disk, ignored by git
    disk.mkdir(exist_ok=True)
    kind = subprocess.run(["stat", "-f", "-c", "%T", str(disk)], capture_output=True, text=True)
    if kind.stdout.strip() in ("tmpfs", "ramfs"):  # where the checkout is, not an install
        pytest.skip("the checkout is in memory: no pages to drop")
    model = disk / f"page-cache-{os.getpid()}" / "my model"
    model.mkdir(parents=True)
    try:
        blob = model.parent / "blob"
        for path in (model / "config.json", blob):
            path.write_bytes(os.urandom(1 << 20))
        (model / "model.safetensors").symlink_to(blob)
        os.sync()  # dirty pages are not dropped: the weights of a real model were long written
        for path in (model / "config.json", blob):
            path.read_bytes()  # in the page cache now
        said = subprocess.run(
            ["bash", "-s"], input=memory_script(None, str(model)), capture_output=True,
            text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
    finally:
        shutil.rmtree(model.parent)
    found = key_values(said)
    assert found["dropped"] == "1" and int(found["mem_available_kib"]) > 0
    assert int(found["cached_before"]) >= 2 << 20  # both files were read
    assert int(found["cached_bytes"]) < int(found["cached_before"]) // 4


def test_status_names_who_holds_each_nodes_memory() -> None:
    """halo status asks every node its memory: the processes holding 5 % or more, the
    largest first, halo's own and others with how to stop them; a node that does not
    answer has no figure."""
    from halo_cluster.client.node import clients_from
    from halo_cluster.cluster.handle import Cluster
    from halo_cluster.config import Config, NodeConfig
    from halo_cluster.runner.fake import FakeRunner
    from halo_cluster.runner.result import Result
    from halo_cluster.serving.status import memory_view

    total = 125 * 2**20
    said = (
        f"mem_total_kib={total}\nmem_available_kib={20 * 2**20}\n"
        f"owner=4242 4240 {2 * 2**20} {94 * 2**20} other llama-server\n"
        f"owner=77 77 {10 * 2**20} 0 halo vllm\n"
        f"owner=9 9 {2**20} 0 other sshd\n"  # under 5 %: not named
    )
    nodes = (NodeConfig("n1", "n1", "10.0.0.1", halo="halo"), NodeConfig("n2", "n2", "10.0.0.2"))
    config = Config(Path("halo.toml"), "c", "auto", nodes)
    runners = {
        "n1": FakeRunner().on(["bash", "-s"], Result((), 0, said, "")),
        "n2": FakeRunner().on([], Result((), 255, "", "ssh: connect to host n2: No route")),
    }
    found = memory_view(Cluster(config, clients_from(config, runners)))
    assert found["n2"] is None
    assert found["n1"] == {
        "total_gib": 125.0,
        "available_gib": 20.0,
        "owners": [
            {"pid": 4242, "command": "llama-server", "rss_gib": 2.0, "gtt_gib": 94.0,
             "halo": False, "share_pct": 77, "stop": "kill -TERM 4242"},
            {"pid": 77, "command": "vllm", "rss_gib": 10.0, "gtt_gib": 0.0, "halo": True,
             "share_pct": 8, "stop": None},
        ],
    }  # fmt: skip
