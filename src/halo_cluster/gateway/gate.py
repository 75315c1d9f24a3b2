"""The key gate: the one process clients reach, in front of the router (vllm-router) on the
same host, run as ``python -m halo_cluster.gateway.gate --host H --port P --upstream URL
--keys FILE --usage FILE --models FILE``. No secret is in its argv: the keys come hashed
from the key file (keys.py).

- ``GET /health`` (or ``HEAD``) answers ``{"status": "ok"}`` to anyone (halo's liveness check).
- Every other request needs ``Authorization: Bearer <key>`` whose SHA-256 is an active key
  of the key file; without one it is answered 401 in OpenAI's error shape and the upstream is
  never contacted. The key file is read again when it changes (looked at no more than once a
  second, so a revoked key is refused within about a second); a key file that is gone holds
  no keys (every request refused), one that turned to garbage leaves the last good one in
  force, with one line in the log.
- ``GET /v1/models`` is answered here from the models file halo writes
  (``halo.gateway_models/1``): one OpenAI model entry per id and per alias. The file is read
  again when it changes; one that is gone or garbage leaves the last good one in force.
- Anything else goes to ``upstream + path + query``: the same method and body, the headers
  without the hop-by-hop ones, ``Authorization`` and ``Host`` (and ``Accept-Encoding``, so
  that the answer comes uncompressed and its tokens can be counted); with the worker key
  in the environment (``HALO_WORKER_KEY``, see worker_key.py), ``Authorization: Bearer
  <worker key>`` goes instead, the engines' own key that clients never see. A JSON body whose
  ``"model"`` is an alias goes with the alias's id instead. The answer comes back chunk by
  chunk as the upstream sends it (an SSE stream is not held back); an upstream out of reach
  is a 502, a request body over 32 MiB a 413, both in OpenAI's error shape.
- Not for a key: the router's control API (ROUTER_CONTROL: a client could register a server
  of its own as a replica) is a 403, a path with a ``.``/``..`` segment or a control
  character a 400, a compressed body a 415, a body that stalls (BODY_IDLE_S, BODY_TIMEOUT_S)
  a 408, one cut or malformed a 400. A connection whose request head does not come within
  HEAD_TIMEOUT_S is closed, so stalled clients cannot pile up (aiohttp's keep-alive timer:
  armed at the connect in aiohttp 3.14.5, only after a first request in older ones).

Per key name the gate counts requests, the requests it refused itself (4xx, 502), and the
tokens of the answers (meter.py: the ``usage`` an answer carries, else for a stream an
approximation from its events). Requests without a valid key are counted together
(``anonymous_refused``). The counts go to the usage file (keys.py), atomically, mode 0600,
at most every 2 s when they changed and once more on SIGTERM/SIGINT.

Each request is one line on stderr: the key's name (never the key), the method, the path
(without its query, which may carry secrets), the status and the milliseconds. What aiohttp
or asyncio log is one line too (OneLine): no traceback, no request bytes quoted. A file that is
missing or bad at the start, or an address that cannot be listened on, is one line on stderr
and exit code 2. aiohttp is imported only when the gate runs (it is an optional dependency).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from halo_cluster.bounded.jsonin import loads
from halo_cluster.bounded.redact import redact_url
from halo_cluster.errors import HaloError, ListenError, RequestRefused, UsageError
from halo_cluster.gateway.keys import (
    KeyUsage,
    UsageFile,
    active_hashes,
    hash_key,
    read_keys,
    read_usage,
    write_usage,
)
from halo_cluster.gateway.meter import meter_for
from halo_cluster.gateway.models_file import read_models
from halo_cluster.jsonout import JsonObject
from halo_cluster.runner.quote import WORKER_KEY_ENV

if TYPE_CHECKING:
    import aiohttp
    from aiohttp import web
    from yarl import URL

MAX_BODY_BYTES = 32 << 20
INLINE_JSON_BYTES = 64 << 10  # a larger body's alias is looked for in a thread
MAX_KEY_CHARS = 512  # a key is 48; a longer value is no key (and not hashed)
BODY_IDLE_S = 30.0  # a request body that sends nothing for this long is a 408
BODY_TIMEOUT_S = 300.0  # ... and one that takes longer in all
HEAD_TIMEOUT_S = 60.0  # to send a request head from the connect (and idle keep-alive)
RELOAD_INTERVAL_S = 1.0
FLUSH_INTERVAL_S = 2.0
SHUTDOWN_TIMEOUT_S = 5.0  # what a request still running at SIGTERM is given to finish
CONNECT_TIMEOUT_S = 10.0
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "trailers", "transfer-encoding", "upgrade",
})  # fmt: skip
# Expect: the gate has read the body already; the upstream gets it whole
REQUEST_DROP = HOP_BY_HOP | {"authorization", "host", "content-length", "accept-encoding", "expect"}
# vllm-router's control API (its first path segment): never a client's to call
ROUTER_CONTROL = frozenset({
    "workers", "add_worker", "remove_worker", "list_workers", "flush_cache", "get_loads",
    "scheduling", "finish_session", "start_profile", "stop_profile", "get_server_info",
})  # fmt: skip
log = logging.getLogger("halo.gateway.gate")
T = TypeVar("T")


# -- files read again when they change ---------------------------------------------------------
class Watched(Generic[T]):
    """A value loaded from a file, loaded again when the file changes (its mtime, size or
    inode), looked at no more than once per ``interval_s``. The first load raises; a later one
    that fails keeps the last good value and logs one line (once per change of the file)."""

    def __init__(
        self,
        path: Path,
        load: Callable[[Path], T],
        interval_s: float = RELOAD_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path, self._load, self._interval_s, self._clock = path, load, interval_s, clock
        self._seen = _signature(path)
        self.value = load(path)
        self._next = clock() + interval_s

    def get(self) -> T:
        now = self._clock()
        if now < self._next:
            return self.value
        self._next = now + self._interval_s
        seen = _signature(self.path)
        if seen != self._seen:
            self._seen = seen
            try:
                self.value = self._load(self.path)
                log.info("%s read again", self.path)
            except HaloError as err:
                log.warning("%s; the last good one stays in force", err)
        return self.value


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_mtime_ns, found.st_size, found.st_ino)


def load_hashes(path: Path) -> dict[str, str]:
    """sha256 -> name of the active keys of the key file (none when it is gone)."""
    return active_hashes(read_keys(path))


def key_name(authorization: str | None, hashes: Mapping[str, str]) -> str | None:
    """The name of the active key an ``Authorization: Bearer <key>`` header carries, or None."""
    if authorization is None:
        return None
    scheme, _, key = authorization.strip().partition(" ")
    key = key.strip()
    # aiohttp hands undecodable header bytes over as surrogates: no key is more than ASCII
    if scheme.lower() != "bearer" or not key or len(key) > MAX_KEY_CHARS or not key.isascii():
        return None
    return hashes.get(hash_key(key))


def path_problem(path: str) -> tuple[int, str, str] | None:
    """Why the gate refuses the (decoded) ``path`` of a request with a valid key: (status,
    message, code), or None when it goes on."""
    segments = path.split("/")
    if any(s in (".", "..") for s in segments) or any(ord(c) < 32 or c == "\x7f" for c in path):
        return 400, "the path has a '.' or '..' segment or a control character", "bad_path"
    first = next((s for s in segments if s), "")
    if first.lower() in ROUTER_CONTROL:
        return 403, "the router's control API is not served through the gateway", "forbidden"
    return None


# -- counting ----------------------------------------------------------------------------------
@dataclass
class Tally:
    """The gate's counts in memory; ``changed`` until they are written."""

    keys: dict[str, KeyUsage] = field(default_factory=dict)
    anonymous_refused: int = 0
    changed: bool = False

    @classmethod
    def starting_from(cls, usage: UsageFile) -> Tally:
        return cls(dict(usage.keys), usage.anonymous_refused)

    def add(self, name: str, counts: KeyUsage) -> None:
        self.keys[name] = self.keys.get(name, KeyUsage()).plus(counts)
        self.changed = True

    def refuse_anonymous(self) -> None:
        self.anonymous_refused += 1
        self.changed = True

    def snapshot(self) -> UsageFile:
        return UsageFile(dict(self.keys), self.anonymous_refused)


# -- requests ----------------------------------------------------------------------------------
def kept_headers(items: Iterable[tuple[str, str]], drop: frozenset[str]) -> list[tuple[str, str]]:
    """``items`` without the headers in ``drop`` and those a ``Connection`` header names."""
    items = list(items)
    named = {
        token.strip().lower()
        for name, value in items
        if name.lower() == "connection"
        for token in value.split(",")
    }
    return [(name, value) for name, value in items if name.lower() not in drop | named]


def rewrite_model(body: bytes, aliases: Mapping[str, str]) -> bytes:
    """``body`` with its JSON ``"model"`` changed to the id when it is an alias."""
    if not aliases or b'"model"' not in body:
        return body
    # no alias anywhere in it: not parsed (a 32 MiB body of token ids parses for seconds)
    if not any(f'"{alias}"'.encode() in body for alias in aliases):
        return body
    try:
        data = loads(body)
    except ValueError:
        return body
    if not isinstance(data, dict) or not isinstance(data.get("model"), str):
        return body
    alias = data["model"]
    if alias not in aliases:
        return body
    named = re.compile(rb'"model"\s*:\s*' + re.escape(json.dumps(alias).encode()))
    ident = b'"model": ' + json.dumps(aliases[alias]).encode()
    if len(named.findall(body)) == 1:  # changed in place: dumping 32 MiB holds the GIL for long
        return named.sub(lambda _: ident, body)
    data["model"] = aliases[alias]
    return json.dumps(data).encode("utf-8")


def error_body(message: str, kind: str, code: str) -> JsonObject:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": kind, "code": code}}


TOO_LARGE = (413, "the request body is larger than 32 MiB", "request_too_large")


async def read_body(request: web.Request) -> bytes:
    """The request's body; RequestRefused when it is longer than MAX_BODY_BYTES (413), compressed
    (415), stalls BODY_IDLE_S or BODY_TIMEOUT_S (408; aiohttp also leaves a reader waiting
    when a later chunk is malformed), or is cut or malformed (400)."""
    from aiohttp.web import RequestPayloadError

    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if request.body_exists and encoding != "identity":
        raise RequestRefused(415, "send the request body uncompressed", "unsupported_encoding")
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise RequestRefused(*TOO_LARGE)
    loop, body = asyncio.get_running_loop(), bytearray()
    deadline = loop.time() + BODY_TIMEOUT_S
    try:
        while chunk := await asyncio.wait_for(
            request.content.readany(), max(0.0, min(BODY_IDLE_S, deadline - loop.time()))
        ):
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                raise RequestRefused(*TOO_LARGE)
    except TimeoutError:
        raise RequestRefused(408, "the request body stopped coming", "request_timeout") from None
    except (ConnectionError, RequestPayloadError) as err:
        message = f"the request body was cut or malformed ({type(err).__name__})"
        raise RequestRefused(400, message, "bad_request_body") from None
    return bytes(body)


@dataclass(frozen=True)
class Settings:
    """The gate's command line."""

    host: str
    port: int
    upstream: str
    keys: Path
    usage: Path
    models: Path
    log_level: str = "info"
    # the engines' own key (gateway/worker_key.py), put on every request let through; it
    # comes from the environment (WORKER_KEY_ENV), never argv, and is in no repr
    worker_key: str | None = field(default=None, repr=False)


class Gate:
    """The request handler and what it keeps: the keys, the models, the counts, the session
    to the upstream."""

    def __init__(self, settings: Settings) -> None:
        if not os.path.lexists(settings.keys):
            raise UsageError(f"{settings.keys}: no key file; make a key first")
        self.settings = settings
        self.upstream = settings.upstream.rstrip("/")
        self.hashes = Watched(settings.keys, load_hashes)
        self.models = Watched(settings.models, read_models)
        self.tally = Tally.starting_from(read_usage(settings.usage))
        self.session: aiohttp.ClientSession | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        name: str | None = None
        status = 500  # what aiohttp answers when the handler fails
        try:
            name, response = await self._answer(request)
            status = response.status
            return response
        finally:
            ms = (time.monotonic() - started) * 1000
            path = request.rel_url.raw_path[:200]
            log.info("key=%s %s %s %d %.0fms", name or "-", request.method, path, status, ms)

    async def _answer(self, request: web.Request) -> tuple[str | None, web.StreamResponse]:
        from aiohttp import web

        if request.method in ("GET", "HEAD") and request.path == "/health":
            return None, web.json_response({"status": "ok"})
        name = key_name(request.headers.get("Authorization"), self.hashes.get())
        if name is None:
            self.tally.refuse_anonymous()
            return None, _refusal(request.headers.get("Authorization") is None)
        self.tally.add(name, KeyUsage(requests=1))
        refused = path_problem(request.path)
        if refused is not None:
            self.tally.add(name, KeyUsage(refused=1))
            return name, _failure(*refused)
        if request.method == "GET" and request.path == "/v1/models":
            return name, web.json_response(self.models.get().openai_list())
        return name, await self._forward(request, name)

    async def _forward(self, request: web.Request, name: str) -> web.StreamResponse:
        import aiohttp

        try:
            body = await read_body(request)
        except RequestRefused as err:
            self.tally.add(name, KeyUsage(refused=1))
            return _failure(err.status, err.message, err.code)
        aliases = self.models.get().aliases()
        if len(body) < INLINE_JSON_BYTES:
            body = rewrite_model(body, aliases)
        else:  # in a thread: the loop serves the others while a large body is parsed
            body = await asyncio.to_thread(rewrite_model, body, aliases)
        assert self.session is not None  # made when the app starts
        try:
            upstream = await self.session.request(
                request.method,
                self._target(request),
                data=body or None,
                headers=self._headers(request),
                allow_redirects=False,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            self.tally.add(name, KeyUsage(refused=1))
            shown = redact_url(self.upstream)
            log.warning("the upstream %s cannot be reached (%s)", shown, err or type(err).__name__)
            message = "the model server behind the gateway cannot be reached; try again later"
            return _failure(502, message, "upstream_unreachable", "server_error")
        async with upstream:
            return await self._relay(request, upstream, name)

    def _target(self, request: web.Request) -> URL:
        """``upstream + path + query``, as the client encoded them (not quoted again)."""
        from yarl import URL

        rel = request.rel_url  # path and query only, whatever form the request line had
        query = f"?{rel.raw_query_string}" if rel.raw_query_string else ""
        return URL(self.upstream + rel.raw_path + query, encoded=True)

    def _headers(self, request: web.Request) -> list[tuple[str, str]]:
        headers = kept_headers(request.headers.items(), REQUEST_DROP)
        if self.settings.worker_key:
            headers.append(("Authorization", f"Bearer {self.settings.worker_key}"))
        return headers

    async def _relay(
        self, request: web.Request, upstream: aiohttp.ClientResponse, name: str
    ) -> web.StreamResponse:
        import aiohttp
        from aiohttp import web

        headers = kept_headers(upstream.headers.items(), HOP_BY_HOP)
        response = web.StreamResponse(
            status=upstream.status, reason=upstream.reason, headers=headers
        )
        meter = meter_for(upstream.headers.get("Content-Type", ""))
        try:
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                meter.feed(chunk)
                await response.write(chunk)
            await response.write_eof()
        except (ConnectionError, aiohttp.ClientError, TimeoutError) as err:
            log.info(
                "key=%s %s: the answer was cut (%s)",
                name,
                request.rel_url.raw_path[:200],
                type(err).__name__,
            )
        finally:
            prompt, completion = meter.tokens()
            self.tally.add(name, KeyUsage(prompt_tokens=prompt, completion_tokens=completion))
        return response

    async def session_context(self, _app: web.Application) -> AsyncIterator[None]:
        """The upstream session, open while the app runs: no limit on connections (each
        stream holds one), no read timeout (a long answer is not an error), bytes relayed
        as they come (not decompressed)."""
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S)
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=timeout,
            auto_decompress=False,
            skip_auto_headers=("Accept-Encoding", "User-Agent"),
        ) as session:
            self.session = session
            yield
        self.session = None

    def flush(self) -> None:
        """The counts into the usage file when they changed; a failure is one log line."""
        if not self.tally.changed:
            return
        self.tally.changed = False
        try:
            write_usage(self.settings.usage, self.tally.snapshot())
        except HaloError as err:
            self.tally.changed = True
            log.warning("%s", err)


def _refusal(missing: bool) -> web.Response:
    message = (
        "no API key: send it as 'Authorization: Bearer <key>'"
        if missing
        else "the API key is not valid (unknown or revoked)"
    )
    return _failure(401, message, "invalid_api_key")


def _failure(
    status: int, message: str, code: str, kind: str = "invalid_request_error"
) -> web.Response:
    from aiohttp import web

    return web.json_response(error_body(message, kind, code), status=status)


# -- the process -------------------------------------------------------------------------------
async def serve(gate: Gate) -> None:
    """Listen until SIGTERM or SIGINT, writing the counts every FLUSH_INTERVAL_S when they
    changed, and once more at the end."""
    from aiohttp import web

    app = web.Application()
    app.router.add_route("*", r"/{tail:[\s\S]*}", gate.handle)  # a newline too
    app.cleanup_ctx.append(gate.session_context)
    runner = web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        keepalive_timeout=HEAD_TIMEOUT_S,
        auto_decompress=False,  # a body is relayed as it came (read_body refuses compressed)
    )
    await runner.setup()
    try:
        await _listen(runner, gate.settings)
        await _until_stopped(gate)
    finally:
        await runner.cleanup()
        gate.flush()


async def _listen(runner: web.AppRunner, settings: Settings) -> None:
    from aiohttp import web

    site = web.TCPSite(runner, settings.host, settings.port, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    try:
        await site.start()
    except OSError as err:
        raise ListenError(
            f"cannot listen on {settings.host}:{settings.port}: {err.strerror or err}"
        ) from None
    log.info(
        "halo gate on %s:%d in front of %s",
        settings.host,
        settings.port,
        redact_url(settings.upstream),
    )


async def _until_stopped(gate: Gate) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), FLUSH_INTERVAL_S)
        gate.flush()
    log.info("stopping")


class OneLine(logging.Filter):
    """A record with an exception (aiohttp's "Error handling request", asyncio's) as one
    line: the class and its first line up to the first colon, after which aiohttp's parser
    quotes the request's bytes (a key may be among them), never a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        err = record.exc_info[1] if record.exc_info else None
        if err is not None:
            said = (str(getattr(err, "message", None) or err).strip() or "-").splitlines()[0]
            said = said.split(":")[0].strip()[:100]
            record.msg = f"{record.getMessage()}: {type(err).__name__} ({said})"
            record.args, record.exc_info, record.exc_text = (), None, None
        record.stack_info = None
        return True


def parse_args(argv: list[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(
        prog="python -m halo_cluster.gateway.gate",
        description="halo's key gate: API keys checked and counted in front of the router",
    )
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", required=True, type=int)
    parser.add_argument(
        "--upstream", required=True, help="the router's URL, e.g. http://127.0.0.1:8001"
    )
    parser.add_argument("--keys", required=True, type=Path, help="the key file (hashed keys)")
    parser.add_argument("--usage", required=True, type=Path, help="where the counts are written")
    parser.add_argument("--models", required=True, type=Path, help="the models file halo writes")
    parser.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error")
    )
    args = parser.parse_args(argv)
    return Settings(
        args.host, args.port, args.upstream, args.keys, args.usage, args.models, args.log_level
    )


def check(settings: Settings) -> Settings:
    """``settings`` when they can work; UsageError (one line) otherwise."""
    if not 0 < settings.port < 65536:
        raise UsageError(f"--port {settings.port}: not a TCP port (1-65535)")
    if not settings.upstream.startswith(("http://", "https://")):
        raise UsageError(
            f"--upstream {redact_url(settings.upstream)[:120]!r}: not an http:// or https:// URL"
        )
    return replace(settings, upstream=settings.upstream.rstrip("/"))


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(message)s",
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(OneLine())
    try:
        import aiohttp  # noqa: F401  (here, not at import: an optional dependency)
    except ImportError:
        print("halo gate: needs aiohttp: pip install 'halo-cluster[gateway]'", file=sys.stderr)
        return 2
    try:
        worker_key = os.environ.get(WORKER_KEY_ENV) or None
        asyncio.run(serve(Gate(check(replace(settings, worker_key=worker_key)))))
    except HaloError as err:
        print(f"halo gate: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the signal handlers were in place
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
