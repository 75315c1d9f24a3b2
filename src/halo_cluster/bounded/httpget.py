"""HTTP GET behind one function, like commands behind the Runner: ``http_get`` for real,
``FakeHttp`` (same call) for tests. Errors are urllib's: ``urllib.error.URLError`` (an
``OSError``) for anything from a refused connection to an HTTP error status."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Protocol

DEFAULT_LIMIT_BYTES = 1 << 20


class HttpGet(Protocol):
    def __call__(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 5.0,
        limit_bytes: int | None = DEFAULT_LIMIT_BYTES,
    ) -> bytes: ...


def http_get(
    url: str,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 5.0,
    limit_bytes: int | None = DEFAULT_LIMIT_BYTES,
) -> bytes:
    """The body of ``GET url`` (at most ``limit_bytes``; all of it when None)."""
    request = urllib.request.Request(url, headers=dict(headers or {}))
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        body: bytes = response.read() if limit_bytes is None else response.read(limit_bytes)
    return body


class FakeHttp:
    """Pages by URL: bytes are returned, an exception is raised; any other URL is refused
    (as a closed port is). Every call is recorded as (url, headers)."""

    def __init__(self, pages: Mapping[str, bytes | BaseException]) -> None:
        self.pages = dict(pages)
        self.calls: list[tuple[str, dict[str, str]]] = []

    def __call__(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 5.0,
        limit_bytes: int | None = DEFAULT_LIMIT_BYTES,
    ) -> bytes:
        self.calls.append((url, dict(headers or {})))
        page = self.pages.get(url)
        if page is None:
            raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
        if isinstance(page, BaseException):
            raise page
        return page if limit_bytes is None else page[:limit_bytes]
