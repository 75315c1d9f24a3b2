"""An OpenAI-compatible streaming load generator: per concurrency level, time to first
token, inter-token latency, time per output token, end-to-end latency (p50/p90/p99, mean) and
output tokens/s — measured the way ``vllm bench serve`` measures them:

- the clock of a request starts when it is sent;
- every streamed event that carries a choice is a step, also one whose text is empty (a token
  that does not decode to text on its own, such as half of a multi-byte character): TTFT is
  the first step, ITL the gaps between steps, end-to-end the last step;
- the output tokens are the server's ``usage.completion_tokens`` (asked for with
  ``stream_options.include_usage``); only a server that reports no usage has its steps counted
  instead, and the result says so (``tokens_from``);
- TPOT = (end-to-end − TTFT) / (tokens − 1); output tokens/s = all output tokens / the wall
  time of the level, from the first request sent to the last one done;
- with a ``Meter`` (bench/energy.py), every node's energy over each level's timed window,
  read outside the timed part, and per output token;
- one untimed warm-up request first (``warmup``; 0 for none, as ``vllm bench serve`` by
  default); then every request gets its own random prompt of
  ``input_len`` tokens (bench/serve_prompts.py), ``max_tokens = output_len`` and
  ``ignore_eos``, so every request generates exactly ``output_len`` tokens.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from halo_cluster.bench.energy import LevelEnergy, Meter
from halo_cluster.bench.serve_prompts import Prompt, random_text, workload
from halo_cluster.bounded.redact import redact_url
from halo_cluster.client.fanout import POLL_S
from halo_cluster.errors import HaloError
from halo_cluster.jsonout import JsonObject
from halo_cluster.schema import SCHEMAS
from halo_cluster.stats import quantile

SCHEMA = SCHEMAS["serve"]
MAX_ANSWER = 16 << 20  # /tokenize and /v1/models answers: a few KiB from a real server


@dataclass
class Sample:
    """One request: its steps' timing, and the tokens the server says it made."""

    ttft_s: float | None = None
    gaps_s: list[float] = field(default_factory=list)  # inter-token latencies (ITL)
    e2e_s: float = 0.0  # to the last step
    tokens: int = 0  # output tokens: usage.completion_tokens, else the steps
    chunks: int = 0  # streamed events that carried a choice (the steps)
    prompt_tokens: int | None = None
    tokens_from: str = "chunks"  # "usage" | "chunks"
    error: str | None = None

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.tokens - 1)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _error_text(error: object) -> str:
    if isinstance(error, dict):
        error = error.get("message") or error
    return f"server error in the stream: {str(error)[:200]}"


def parse_stream(lines: Iterable[tuple[float, str]], start_s: float) -> Sample:
    """A Sample from the server-sent events of one streamed completion, each line with the
    ``time.perf_counter()`` at which it arrived. Pure; garbage ends in ``Sample.error``."""
    sample = Sample()
    last = start_s
    usage: JsonObject = {}
    for at, raw in lines:
        line = raw.strip()
        if not line.startswith("data:"):
            continue  # blank separators, SSE comments (": ping"), event:/id: fields
        data = line[5:].strip()
        if data == "[DONE]":
            break
        try:
            event = json.loads(data)
        except (ValueError, RecursionError):  # a hostile server's nesting too
            event = None
        if not isinstance(event, dict):
            sample.error = f"not a JSON object in the stream: {data[:80]!r}"
            return sample
        if event.get("error"):  # vLLM reports a failure after the 200 as an error event
            sample.error = _error_text(event["error"])
            return sample
        if isinstance(event.get("usage"), dict):
            usage = event["usage"]
        if event.get("choices"):  # a step, even when its text is empty
            if sample.ttft_s is None:
                sample.ttft_s = at - start_s
            else:
                sample.gaps_s.append(at - last)
            last = at
            sample.chunks += 1
    if sample.ttft_s is None:
        sample.error = "the stream ended before the first token"
        return sample
    sample.e2e_s = last - start_s
    completion = _count(usage.get("completion_tokens"))
    sample.tokens, sample.tokens_from = (
        (completion, "usage") if completion is not None else (sample.chunks, "chunks")
    )
    sample.prompt_tokens = _count(usage.get("prompt_tokens"))
    return sample


@dataclass(frozen=True)
class Percentiles:
    """p50/p90/p99 and the mean of one measure, in ms (None: no sample)."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return {"p50": self.p50, "p90": self.p90, "p99": self.p99, "mean": self.mean}


def percentiles(values: list[float]) -> Percentiles:
    """p50/p90/p99 and the mean of seconds, in ms."""

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1e3, 3)

    mean = sum(values) / len(values) if values else None
    p50, p90, p99 = (ms(quantile(values, q)) for q in (0.5, 0.9, 0.99))
    return Percentiles(p50, p90, p99, ms(mean))


@dataclass(frozen=True)
class Level:
    """One concurrency level's numbers (``levels`` of ``halo.bench.serve/1``)."""

    concurrency: int
    requests: int
    errors: int
    first_error: str | None
    ttft_ms: Percentiles
    itl_ms: Percentiles
    tpot_ms: Percentiles
    e2e_ms: Percentiles
    output_tokens: int
    output_chunks: int  # fewer than tokens: tokens bundled
    output_tokens_per_s: float | None
    tokens_from: str  # "usage" | "chunks"
    input_tokens: int | None
    wall_s: float
    energy: LevelEnergy | None = None  # None: not measured (no nodes known)

    def to_dict(self) -> JsonObject:
        return {
            "concurrency": self.concurrency,
            "requests": self.requests,
            "errors": self.errors,
            "first_error": self.first_error,
            "ttft_ms": self.ttft_ms.to_dict(),
            "itl_ms": self.itl_ms.to_dict(),
            "tpot_ms": self.tpot_ms.to_dict(),
            "e2e_ms": self.e2e_ms.to_dict(),
            "output_tokens": self.output_tokens,
            "output_chunks": self.output_chunks,
            "output_tokens_per_s": self.output_tokens_per_s,
            "tokens_from": self.tokens_from,
            "input_tokens": self.input_tokens,
            "wall_s": self.wall_s,
            "energy": None if self.energy is None else self.energy.to_dict(),
        }


def summarize(concurrency: int, samples: list[Sample], wall_s: float) -> Level:
    """One level's numbers from its samples and its wall time."""
    good = [s for s in samples if s.error is None]
    errors = [s.error for s in samples if s.error]
    tokens = sum(s.tokens for s in good)
    prompt = [s.prompt_tokens for s in good if s.prompt_tokens is not None]
    known = bool(good) and len(prompt) == len(good)
    usage = bool(good) and all(s.tokens_from == "usage" for s in good)
    return Level(
        concurrency=concurrency,
        requests=len(samples),
        errors=len(errors),
        first_error=errors[0] if errors else None,
        ttft_ms=percentiles([s.ttft_s for s in good if s.ttft_s is not None]),
        itl_ms=percentiles([g for s in good for g in s.gaps_s]),
        tpot_ms=percentiles([t for s in good if (t := s.tpot_s) is not None]),
        e2e_ms=percentiles([s.e2e_s for s in good]),
        output_tokens=tokens,
        output_chunks=sum(s.chunks for s in good),
        output_tokens_per_s=round(tokens / wall_s, 3) if wall_s > 0 else None,
        tokens_from="usage" if usage else "chunks",
        input_tokens=sum(prompt) if known else None,
        wall_s=round(wall_s, 3),
    )


class Client:
    """The server's HTTP endpoints over one keep-alive connection per worker thread, as the
    connection pool of ``vllm bench serve`` keeps them."""

    def __init__(self, url: str, key: str | None, timeout_s: float = 300.0) -> None:
        parts = urllib.parse.urlsplit(url)
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port
        self.prefix = parts.path.rstrip("/")
        self.headers = {
            "Content-Type": "application/json",
            **({"Authorization": f"Bearer {key}"} if key else {}),
        }
        self.timeout_s = timeout_s
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            conn = kind(self.host, self.port, timeout=self.timeout_s)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def drop(self) -> None:
        """Forget this thread's connection (after an error: the next request opens one)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def close(self) -> None:
        """Close every connection; a thread blocked reading one gets an error at once."""
        with self._lock:
            for conn in self._all:
                if conn.sock is not None:
                    with contextlib.suppress(OSError):
                        conn.sock.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._all.clear()

    def post(self, path: str, body: JsonObject) -> http.client.HTTPResponse:
        data = json.dumps(body)
        for attempt in range(2):
            conn = self.connection()
            kept = conn.sock is not None
            try:
                conn.request("POST", self.prefix + path, body=data, headers=self.headers)
                return conn.getresponse()
            except ConnectionError:  # the server closed an idle keep-alive connection
                self.drop()
                if not kept or attempt:
                    raise
        raise AssertionError("unreachable")

    def finish(self, response: http.client.HTTPResponse) -> None:
        """Read the rest of a response so that the connection can carry the next request."""
        response.read()
        if response.will_close:
            self.drop()


def _timed(response: http.client.HTTPResponse) -> Iterator[tuple[float, str]]:
    for raw in response:
        yield time.perf_counter(), raw.decode("utf-8", "replace")


def completion_body(model: str, prompt: str, max_tokens: int) -> JsonObject:
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
        "ignore_eos": True,
    }


def stream_request(client: Client, body: JsonObject) -> Sample:
    start = time.perf_counter()
    try:
        response = client.post("/v1/completions", body)
        if response.status != 200:
            text = response.read()[:200].decode("utf-8", "replace")
            client.drop()  # a server that refused may not have read the body: start afresh
            return Sample(error=f"HTTP {response.status}: {text}")
        sample = parse_stream(_timed(response), start)
        client.finish(response)
        return sample
    except (OSError, http.client.HTTPException) as err:
        client.drop()
        return Sample(error=f"{type(err).__name__}: {err}")


def tokenize_counter(client: Client, model: str) -> Callable[[str], int | None]:
    """The server's count of a prompt's tokens from its ``POST /tokenize``: vLLM's shape
    (``{"model", "prompt"}`` -> ``{"count"}``) or llama-server's (``{"content",
    "add_special"}`` -> ``{"tokens": [...]}``), whichever the server answers first; None
    when it has no such endpoint. Both count the BOS token a completion adds."""
    shapes: list[tuple[Callable[[str], JsonObject], Callable[[Any], int | None]]] = [
        (lambda text: {"model": model, "prompt": text}, lambda data: _count(data.get("count"))),
        (
            lambda text: {"content": text, "add_special": True},
            lambda data: len(data["tokens"]) if isinstance(data.get("tokens"), list) else None,
        ),
    ]

    def ask(
        text: str, body: Callable[[str], JsonObject], read: Callable[[Any], int | None]
    ) -> int | None:
        try:
            response = client.post("/tokenize", body(text))
            kind = response.getheader("Content-Type") or ""
            if response.status != 200 or "json" not in kind:
                client.finish(response)
                return None
            data = json.loads(response.read(MAX_ANSWER))
            client.finish(response)
        except (OSError, http.client.HTTPException, ValueError, RecursionError):
            client.drop()
            return None
        return read(data) if isinstance(data, dict) else None

    def count(text: str) -> int | None:
        for index, (body, read) in enumerate(shapes):
            found = ask(text, body, read)
            if found is not None:
                if index:  # this server's shape: ask it first from now on
                    shapes.insert(0, shapes.pop(index))
                return found
        return None

    return count


def usage_counter(client: Client, model: str) -> Callable[[str], int | None]:
    """A prompt's tokens from the ``usage`` of a one-token completion."""
    return lambda text: stream_request(client, completion_body(model, text, 1)).prompt_tokens


def model_id(client: Client) -> str:
    try:
        conn = client.connection()
        conn.request("GET", client.prefix + "/v1/models", headers=client.headers)
        response = conn.getresponse()
        body = response.read(MAX_ANSWER)
        if response.status != 200:
            reason = body[:120].decode("utf-8", "replace").strip()
            raise HaloError(f"GET /v1/models answered HTTP {response.status}: {reason}")
        return str(json.loads(body)["data"][0]["id"])
    except (OSError, http.client.HTTPException) as err:
        client.drop()
        raise HaloError(f"no answer to GET /v1/models ({type(err).__name__}: {err})") from None
    except (ValueError, RecursionError, KeyError, IndexError, TypeError):
        raise HaloError("GET /v1/models did not name a model; pass --model") from None


def run_level(
    client: Client, model: str, concurrency: int, prompts: list[Prompt], output_len: int
) -> Level:
    start = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=concurrency)
    try:
        futures = [
            pool.submit(stream_request, client, completion_body(model, p.text, output_len))
            for p in prompts
        ]
        samples = [_sample(future) for future in futures]
    except BaseException:  # Ctrl-C: end the streams in flight instead of waiting for them
        pool.shutdown(wait=False, cancel_futures=True)
        client.close()
        raise
    wall = time.perf_counter() - start
    pool.shutdown()
    client.close()  # the pool's threads are gone: so are their connections
    return summarize(concurrency, samples, wall)


def _sample(future: Future[Sample]) -> Sample:
    """A stream's sample, waited for in steps: a Ctrl-C that lands just before a wait without
    a timeout is only seen when that wait ends, here when the stream in flight has ended by
    itself (it would be awaited, not cut); in steps it is seen within one."""
    while True:
        try:
            return future.result(timeout=POLL_S)
        except TimeoutError:
            continue


@dataclass(frozen=True)
class LoadRun:
    """A whole ``halo bench serve`` run: the workload as sent, and each level measured
    (the body of ``halo.bench.serve/1``; the stamp is added when it is saved)."""

    url: str
    model: str
    input_len: int
    output_len: int
    prompt_fit: str  # "tokenize" | "usage" | "words"
    prompt_tokens: tuple[int, ...]  # each fitted prompt's tokens, where known
    warmup: int
    seed: int | None
    levels: tuple[Level, ...]

    @property
    def tokens_from(self) -> str:
        return "usage" if all(lv.tokens_from == "usage" for lv in self.levels) else "chunks"

    def level(self, concurrency: int) -> Level | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)

    def to_dict(self) -> JsonObject:
        return {
            "schema": SCHEMA,
            "kind": "serve",
            "url": redact_url(self.url),  # where it went, never its credentials
            "model": self.model,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "workload": {
                "prompts": "random words, one prompt per request",
                "prompt_fit": self.prompt_fit,
                "prompt_tokens_min": min(self.prompt_tokens, default=None),
                "prompt_tokens_max": max(self.prompt_tokens, default=None),
                "max_tokens": self.output_len,
                "ignore_eos": True,
                "temperature": 0.0,
                "warmup_requests": self.warmup,
                "seed": self.seed,
            },
            "tokens_from": self.tokens_from,
            "levels": [lv.to_dict() for lv in self.levels],
        }


def measure(
    url: str,
    model: str | None,
    levels: list[int],
    prompts: int,
    input_len: int,
    output_len: int,
    key: str | None,
    progress: Callable[[str], None] | None = None,
    seed: int | None = None,
    warmup: int = 1,
    meter: Meter | None = None,
) -> LoadRun:
    """The load at each concurrency level in turn (the module's docstring says how);
    with ``meter``, each level's energy over its timed window."""
    say = progress or (lambda _m: None)
    client = Client(url, key)
    try:
        model = model or model_id(client)
        say(f"fitting {prompts * len(levels)} random prompts to {input_len} tokens")
        rng = random.Random(seed)
        batch, fitted = workload(
            rng,
            prompts * len(levels),
            input_len,
            tokenize_counter(client, model),
            usage_counter(client, model),
        )
        for _ in range(warmup):
            say("warm-up request")
            warm = random_text(rng, batch[0].words)  # not a workload prompt: nothing to cache
            stream_request(client, completion_body(model, warm, output_len))
        if meter is not None:
            say("power: asking every node for its power sources")
            for node, problem in meter.probe().items():
                say(f"power: {node}: {problem}")
        results = []
        for index, concurrency in enumerate(levels):
            say(f"concurrency {concurrency}: {prompts} requests")
            chosen = batch[index * prompts : (index + 1) * prompts]
            with meter.window() if meter else contextlib.nullcontext() as window:
                level = run_level(client, model, concurrency, chosen, output_len)
            if window is not None:
                level = replace(level, energy=window.energy(level.output_tokens))
            results.append(level)
    finally:
        client.close()
    return LoadRun(
        url,
        model,
        input_len,
        output_len,
        fitted,
        tuple(p.tokens for p in batch if p.tokens is not None),
        warmup,
        seed,
        tuple(results),
    )
