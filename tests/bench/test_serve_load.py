"""halo bench serve: the SSE parser on a recorded vLLM stream and on anything at all, the level
summary, the random prompts, and the command for real over HTTP (a vLLM-shaped fake server,
and the bundled stand-in for vLLM, which reports no usage)."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.bench.serve_load import (
    Client,
    Sample,
    completion_body,
    parse_stream,
    run_level,
    stream_request,
    summarize,
    tokenize_counter,
)
from halo_cluster.bench.serve_prompts import Prompt, fit, next_word_count, workload
from halo_cluster.examples import EXAMPLES
from tests.bench.fake_openai import FakeOpenAI, count_tokens, serving
from tests.conftest import free_port

STANDIN = EXAMPLES / "standin_vllm.py"
HALO = str(Path(sys.executable).parent / "halo")

# `vllm serve` 0.32.0 (the lab's tiny model, temperature 1, max_tokens 6, include_usage):
# its first token decodes to no text on its own.
RECORDED = """data: {"id":"cmpl-acd199fe55ad2d07","object":"text_completion","created":1796049193,"model":"/tmp/bsmodel","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}

data: {"id":"cmpl-acd199fe55ad2d07","object":"text_completion","created":1796049193,"model":"/tmp/bsmodel","choices":[{"index":0,"text":"�{","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}

data: {"id":"cmpl-acd199fe55ad2d07","object":"text_completion","created":1796049193,"model":"/tmp/bsmodel","choices":[{"index":0,"text":"436","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}

data: {"id":"cmpl-acd199fe55ad2d07","object":"text_completion","created":1796049193,"model":"/tmp/bsmodel","choices":[{"index":0,"text":"ops","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}

data: {"id":"cmpl-acd199fe55ad2d07","object":"text_completion","created":1796049193,"model":"/tmp/bsmodel","choices":[{"index":0,"text":" 586208","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}

data: {"id":"cmpl-acd199fe55ad2d07","object":"text_completion","created":1796049193,"model":"/tmp/bsmodel","choices":[{"index":0,"text":"9367","logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}

data: {"id":"cmpl-acd199fe55ad2d07","object":"text_completion","created":1796049193,"model":"/tmp/bsmodel","choices":[],"usage":{"prompt_tokens":6,"total_tokens":12,"completion_tokens":6},"system_fingerprint":"vllm-0.32.0-f783581d"}

data: [DONE]

"""


def timed(text: str, step_s: float = 0.5) -> list[tuple[float, str]]:
    """Each line of ``text`` with an arrival time, one step apart from 0."""
    return [(index * step_s, line) for index, line in enumerate(text.split("\n"))]


def test_recorded_vllm_stream_times_every_token_and_takes_usage() -> None:
    # Data lines arrive at 0, 1, ... 5 s (blank lines between), the usage at 6 s.
    assert parse_stream(timed(RECORDED), start_s=-1.0) == Sample(
        ttft_s=1.0,  # the first token, although its text is empty
        gaps_s=[1.0, 1.0, 1.0, 1.0, 1.0],
        e2e_s=6.0,  # the last token, not the usage event or [DONE]
        tokens=6,
        chunks=6,
        prompt_tokens=6,
        tokens_from="usage",
        error=None,
    )


def test_stream_without_usage_counts_chunks() -> None:
    text = "\n".join(line for line in RECORDED.split("\n") if '"usage"' not in line)
    sample = parse_stream(timed(text), start_s=-1.0)
    assert (sample.tokens, sample.chunks, sample.prompt_tokens, sample.tokens_from) == (
        6,
        6,
        None,
        "chunks",
    )


def test_usage_counts_tokens_a_chunk_bundles() -> None:
    # A server that sends two tokens per event: three events, six tokens.
    text = "\n".join(
        [
            ": ping",
            "event: message",
            'data: {"choices": [{"text": " a b"}]}',
            'data:{"choices": [{"text": " c d"}]}',
            'data: {"choices": [{"text": " e f"}], "usage": null}',
            'data: {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 6}}',
            "data: [DONE]",
            'data: {"choices": [{"text": "after the end"}]}',
        ]
    )
    sample = parse_stream(timed(text, 1.0), start_s=0.0)
    assert sample == Sample(
        ttft_s=2.0,
        gaps_s=[1.0, 1.0],
        e2e_s=4.0,
        tokens=6,
        chunks=3,
        prompt_tokens=9,
        tokens_from="usage",
        error=None,
    )
    assert sample.tpot_s == 0.4  # (4 - 2) / (6 - 1)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("data: {not json", "not a JSON object in the stream: '{not json'"),
        ("data: [1, 2]", "not a JSON object in the stream: '[1, 2]'"),
        (
            'data: {"choices": [{"text": "a"}]}\ndata: {"error": {"message": "out of memory"}}',
            "server error in the stream: out of memory",
        ),
        ('data: {"error": "overloaded"}', "server error in the stream: overloaded"),
        ('data: {"choices": []}\ndata: [DONE]', "the stream ended before the first token"),
        ("", "the stream ended before the first token"),
    ],
)
def test_bad_streams_are_errors(text: str, error: str) -> None:
    sample = parse_stream(timed(text), start_s=0.0)
    assert sample.error == error and sample.tokens == 0


EVENTS = st.sampled_from(
    [
        'data: {"choices": [{"text": " x"}]}',
        'data: {"choices": [{"text": ""}]}',
        'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 7}}',
        'data: {"choices": [], "usage": {"completion_tokens": -1, "prompt_tokens": true}}',
        "data: [DONE]",
        ": ping",
        "",
    ]
)


@given(st.lists(st.tuples(st.floats(0, 10), st.one_of(EVENTS, st.text(max_size=40)))))
def test_parser_never_crashes_and_times_are_sane(steps: list[tuple[float, str]]) -> None:
    now, lines = 0.0, []
    for step, line in steps:
        now += step
        lines.append((now, line))
    sample = parse_stream(lines, start_s=0.0)
    if sample.error is None:
        assert sample.ttft_s is not None and 0 <= sample.ttft_s <= sample.e2e_s
        assert len(sample.gaps_s) == sample.chunks - 1 and min(sample.gaps_s, default=0) >= 0
        assert sample.tokens >= 0 and sample.tokens_from in ("usage", "chunks")
        assert abs(sample.ttft_s + sum(sample.gaps_s) - sample.e2e_s) < 1e-6


def test_summarize_a_level() -> None:
    samples = [
        Sample(0.010, [0.002, 0.004], 0.016, 3, 3, 64, "usage"),
        Sample(0.030, [0.002, 0.002], 0.034, 3, 3, 64, "usage"),
        Sample(error="HTTP 500: no"),
    ]
    assert summarize(4, samples, 0.05).to_dict() == {
        "concurrency": 4,
        "requests": 3,
        "errors": 1,
        "first_error": "HTTP 500: no",
        "ttft_ms": {"p50": 10.0, "p90": 30.0, "p99": 30.0, "mean": 20.0},
        "itl_ms": {"p50": 2.0, "p90": 4.0, "p99": 4.0, "mean": 2.5},
        "tpot_ms": {"p50": 2.0, "p90": 3.0, "p99": 3.0, "mean": 2.5},
        "e2e_ms": {"p50": 16.0, "p90": 34.0, "p99": 34.0, "mean": 25.0},
        "output_tokens": 6,
        "output_chunks": 6,
        "output_tokens_per_s": 120.0,
        "tokens_from": "usage",
        "input_tokens": 128,
        "wall_s": 0.05,
        "energy": None,  # not measured: no meter
    }
    empty = {"p50": None, "p90": None, "p99": None, "mean": None}
    assert summarize(1, [Sample(error="x")], 0.0).to_dict() == {
        "concurrency": 1,
        "requests": 1,
        "errors": 1,
        "first_error": "x",
        "ttft_ms": empty,
        "itl_ms": empty,
        "tpot_ms": empty,
        "e2e_ms": empty,
        "output_tokens": 0,
        "output_chunks": 0,
        "output_tokens_per_s": None,
        "tokens_from": "chunks",
        "input_tokens": None,
        "wall_s": 0.0,
        "energy": None,
    }


@pytest.mark.parametrize(
    ("words", "tokens", "target", "expected"),
    [
        (64, 64, 64, 64),
        (64, 128, 64, 32),  # two tokens a word: half the words
        (64, 65, 64, 63),  # a BOS: one word less (the scaled guess would not move)
        (10, 9, 12, 13),
        (1, 5, 2, 1),  # never below one word
        (8, 0, 4, 8),
    ],
)
def test_next_word_count(words: int, tokens: int, target: int, expected: int) -> None:
    assert next_word_count(words, tokens, target) == expected


def three_a_word(text: str) -> int:
    """A tokenizer where a word is three tokens, any other character one, plus a BOS."""
    return 1 + 3 * len(re.findall(r"[a-z]+", text)) + len(re.findall(r"[^a-z\s]", text))


def test_fit_reaches_the_exact_count_with_pieces() -> None:
    for target in (64, 65, 66, 5):
        prompt = fit(random.Random(target), target, three_a_word)
        assert (prompt.tokens, three_a_word(prompt.text)) == (target, target), prompt
    assert fit(random.Random(0), 2, three_a_word).tokens == 4  # one word is the least


def test_fit_with_the_fake_servers_tokenizer() -> None:
    rng = random.Random(1)
    prompts = [fit(rng, 128, count_tokens) for _ in range(20)]
    assert [count_tokens(p.text) for p in prompts] == [128] * 20
    assert len({p.text for p in prompts}) == 20


def test_workload_falls_back_from_tokenize_to_usage_to_words() -> None:
    rng = random.Random(3)
    fitted, how = workload(rng, 3, 32, count_tokens, None)
    assert how == "tokenize" and [p.tokens for p in fitted] == [32, 32, 32]
    probes: list[str] = []

    def probe(text: str) -> int | None:
        probes.append(text)
        return 2 * len(text.split()) + 1

    fitted, how = workload(rng, 3, 33, lambda _t: None, probe)
    assert how == "usage" and [(p.words, p.tokens) for p in fitted] == [(16, None)] * 3
    assert not {p.text for p in fitted} & set(probes)  # the probe's prompts are not reused
    fitted, how = workload(rng, 2, 5, None, lambda _t: None)
    assert how == "words" and [(p.words, p.tokens) for p in fitted] == [(5, None), (5, None)]
    assert isinstance(fitted[0], Prompt) and len(fitted[0].text.split()) == 5


@pytest.mark.parametrize("shape", ["vllm", "llama.cpp"])
def test_tokenize_counts_with_either_servers_shape(shape: str) -> None:
    fake = FakeOpenAI("tiny", token_delay_s=0.0, tokenize=shape)
    with serving(fake) as port:
        client = Client(f"http://127.0.0.1:{port}", None)
        count = tokenize_counter(client, "tiny")
        texts = ["a b c", "one two three fourteen", "x"]
        # the BOS a completion adds is counted in both shapes
        assert [count(t) for t in texts] == [count_tokens(t) for t in texts] == [4, 6, 2]
        client.close()


def test_a_keep_alive_connection_the_server_closed_is_opened_again() -> None:
    fake = FakeOpenAI("tiny", token_delay_s=0.0, idle_close_s=0.1)
    with serving(fake) as port:
        client = Client(f"http://127.0.0.1:{port}", None)
        first = stream_request(client, completion_body("tiny", "a b", 2))
        time.sleep(0.4)  # the server has closed the idle connection meanwhile
        second = stream_request(client, completion_body("tiny", "c d", 2))
        client.close()
    assert (first.error, first.tokens, second.error, second.tokens) == (None, 2, None, 2)
    assert fake.connections == 2


def until(condition: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    """Poll for an event; the bound only turns a hang into a failure (it ends at the event)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.02)


def test_ctrl_c_cuts_the_stream_in_flight() -> None:
    """Ctrl-C while a level streams: KeyboardInterrupt, and the stream in flight is cut, not
    read to its end: the server sees its client go before the last of its tokens (load
    cannot make that happen by itself; awaiting the stream would leave nothing cut)."""
    output_len = 400  # 20 s of tokens at the fake's pace
    fake = FakeOpenAI("tiny", token_delay_s=0.05)
    main = threading.main_thread().ident
    assert main is not None

    def ctrl_c() -> None:  # once the first token is out: a stream is in flight
        until(lambda: fake.own["ttft"][1] >= 1, "a first token")
        signal.pthread_kill(main, signal.SIGINT)

    with serving(fake) as port:
        client = Client(f"http://127.0.0.1:{port}", None)
        sender = threading.Thread(target=ctrl_c, daemon=True)
        sender.start()
        with pytest.raises(KeyboardInterrupt):
            run_level(client, "tiny", 1, [Prompt("a b c", 3, None)], output_len)
        sender.join()
        until(lambda: bool(fake.cut), "the stream cut (the server sees it at its next write)")
    assert len(fake.cut) == 1 and fake.cut[0] < output_len


def bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HALO, "bench", "serve", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_bench_serve_measures_what_vllm_bench_measures(tmp_path: Path) -> None:
    fake = FakeOpenAI("tiny", token_delay_s=0.01)
    with serving(fake) as port:
        done = bench(
            "--url",
            f"http://127.0.0.1:{port}",
            "--concurrency",
            "1,2",
            "--prompts",
            "4",
            "--input-len",
            "24",
            "--output-len",
            "6",
            "--seed",
            "7",
            "--out",
            str(tmp_path / "serve.json"),
            "--json",
        )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["schema"], data["model"], data["tokens_from"]) == (
        "halo.bench.serve/1",
        "tiny",
        "usage",
    )
    assert data["workload"] == {
        "prompts": "random words, one prompt per request",
        "prompt_fit": "tokenize",
        "prompt_tokens_min": 24,
        "prompt_tokens_max": 24,
        "max_tokens": 6,
        "ignore_eos": True,
        "temperature": 0.0,
        "warmup_requests": 1,
        "seed": 7,
    }
    for level in data["levels"]:
        counts = (level["requests"], level["errors"], level["output_tokens"], level["input_tokens"])
        assert counts == (4, 0, 24, 96) and level["tokens_from"] == "usage"
        # A token every 10 ms, every third one with empty text: all of them count.
        assert 8 <= level["itl_ms"]["p50"] <= 80 and 8 <= level["tpot_ms"]["p50"] <= 80
        assert level["ttft_ms"]["p50"] >= 8 and level["e2e_ms"]["p50"] >= 55
    one, two = data["levels"]
    assert two["output_tokens_per_s"] > 1.3 * one["output_tokens_per_s"]  # two streams at once
    _warmup, *timed_bodies = fake.bodies
    assert len(timed_bodies) == 8 and len({b["prompt"] for b in fake.bodies}) == 9
    for body in fake.bodies:
        assert body["stream_options"] == {"include_usage": True} and body["ignore_eos"] is True
        assert body["max_tokens"] == 6 and body["stream"] is True
    assert [count_tokens(b["prompt"]) for b in timed_bodies] == [24] * 8
    # Keep-alive, as vLLM's client pool: the main thread's connection, then one per worker.
    assert fake.connections == 1 + 1 + 2


def test_without_warmup_the_servers_own_histograms_hold_only_the_timed_requests(
    tmp_path: Path,
) -> None:
    """--warmup 0, as `vllm bench serve` runs by default: the server's own TTFT and ITL
    histograms (what benchmarks/bench_serve_vs_vllm.py reads as its witness) count exactly
    the timed requests."""
    fake = FakeOpenAI("tiny", token_delay_s=0.005)
    with serving(fake) as port:
        url = f"http://127.0.0.1:{port}"
        done = bench(
            *("--url", url, "--concurrency", "2", "--prompts", "6", "--input-len", "8"),
            *("--output-len", "4", "--warmup", "0", "--out", str(tmp_path / "s.json"), "--json"),
        )
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            own = response.read().decode()
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["workload"]["warmup_requests"] == 0 and len(fake.bodies) == 6
    found = re.findall(r'^vllm:(\w+)_(sum|count)\{model_name="tiny"\} (\S+)$', own, re.M)
    seen = {f"{name}_{kind}": float(value) for name, kind, value in found}
    counts = {name: value for name, value in seen.items() if name.endswith("_count")}
    assert counts == {
        "time_to_first_token_seconds_count": 6,
        "inter_token_latency_seconds_count": 6 * 3,
    }
    assert seen["time_to_first_token_seconds_sum"] >= 6 * 0.005  # each waited for its token
    assert data["levels"][0]["requests"] == 6 and data["levels"][0]["ttft_ms"]["mean"] >= 5


def test_server_without_usage_is_counted_in_chunks(tmp_path: Path) -> None:
    fake = FakeOpenAI("tiny", token_delay_s=0.0, usage=False)
    with serving(fake) as port:
        done = bench(
            "--url",
            f"http://127.0.0.1:{port}",
            "--concurrency",
            "2",
            "--prompts",
            "3",
            "--output-len",
            "5",
            "--out",
            str(tmp_path / "s.json"),
        )
    assert done.returncode == 0, done.stderr
    assert "the server reported no usage: output tokens are counted chunks" in done.stderr
    # no cluster: no nodes to read power from, and no number
    assert "energy: not measured (no nodes known: --url without a cluster config)" in done.stdout
    saved = json.loads((tmp_path / "s.json").read_text())
    assert saved["tokens_from"] == "chunks" and saved["levels"][0]["output_tokens"] == 15


def test_unreachable_server_is_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = bench("--url", url, "--out", str(tmp_path / "x.json"), "--json")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"halo: error: {url}: no answer to GET /v1/models (")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_config_with_a_reachable_address_goes_direct(tmp_path: Path) -> None:
    fake = FakeOpenAI("tiny", token_delay_s=0.0)
    with serving(fake) as port:
        (tmp_path / "halo.toml").write_text(
            '[cluster]\nname = "t"\n\n[[node]]\nname = "head"\nssh = "nobody@head.invalid"\n'
            'fabric_address = "127.0.0.1"\nmgmt_address = "127.0.0.1"\n\n'
            f'[serve]\nhost = "0.0.0.0"\nport = {port}\n'
        )
        done = bench(
            "--config",
            str(tmp_path / "halo.toml"),
            "--concurrency",
            "1",
            "--prompts",
            "2",
            "--output-len",
            "3",
            "--out",
            str(tmp_path / "x.json"),
            "--json",
        )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["endpoint"] == {"via": "direct", "node": "head", "server": f"127.0.0.1:{port}"}
    assert data["url"] == f"http://127.0.0.1:{port}" and data["levels"][0]["errors"] == 0
    # the head (nobody@head.invalid) does not answer its power command: that node's problem
    energy = data["levels"][0]["energy"]
    assert (energy["coverage"], energy["joules"], energy["joules_per_token"]) == (
        "0 of 1 nodes measured",
        None,
        None,
    )
    assert energy["nodes"][0]["problem"].startswith("no answer: head: power failed: ")


@pytest.fixture
def standin() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(STANDIN),
            "serve",
            "standin-8b",
            "--port",
            str(port),
            "--standin-token-delay",
            "0.01",
        ],
        env={**os.environ, "VLLM_API_KEY": "bench-key"},
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(f"{url}/health", timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_bench_serve_measures_each_level(standin: str, tmp_path: Path) -> None:
    out = tmp_path / "serve.json"
    result = bench(
        "--url",
        standin,
        "--concurrency",
        "1,4",
        "--prompts",
        "8",
        "--output-len",
        "6",
        "--input-len",
        "4",
        "--api-key-env",
        "BENCH_KEY",
        "--out",
        str(out),
        "--json",
        env={"BENCH_KEY": "bench-key"},
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == "halo.bench.serve/1" and data["model"] == "standin-8b"
    assert json.loads(out.read_text())["levels"] == data["levels"]
    # The stand-in has neither usage nor /tokenize: chunks counted, one word per token.
    assert (data["tokens_from"], data["workload"]["prompt_fit"]) == ("chunks", "words")
    one, four = data["levels"]
    assert (one["concurrency"], one["requests"], one["errors"], one["output_tokens"]) == (
        1,
        8,
        0,
        48,
    )
    assert one["e2e_ms"]["p50"] >= 50  # six tokens, one every 10 ms
    assert one["ttft_ms"]["p50"] > 0 and one["e2e_ms"]["p99"] >= one["e2e_ms"]["p50"]
    assert (
        four["output_tokens_per_s"] > one["output_tokens_per_s"]
    )  # concurrency helps a latency-bound server
    assert "bench-key" not in result.stdout


def test_wrong_key_is_counted_as_errors(standin: str, tmp_path: Path) -> None:
    result = bench(
        "--url",
        standin,
        "--model",
        "standin-8b",
        "--concurrency",
        "2",
        "--prompts",
        "3",
        "--out",
        str(tmp_path / "x.json"),
        "--json",
    )
    assert result.returncode == 1
    level = json.loads(result.stdout)["levels"][0]
    assert level["errors"] == 3 and level["first_error"].startswith("HTTP 401")
