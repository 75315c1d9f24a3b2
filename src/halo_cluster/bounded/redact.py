"""Credentials out of a URL before halo writes or prints it: a URL someone gave (``--url
http://user:pass@host/v1?token=…``) reaches result files, JSON and the terminal, and none of
them may keep a secret (docs/design.md, "Side effects and secrets").

``redact_url`` replaces the userinfo (``user:pass@``, or a bare token before ``@``) and the
value of every query parameter whose name looks secret (token, key, secret, password, auth,
signature, session, credential…) with ``***``; the scheme, host, port, path, the other
parameters and the fragment stay as given, so the URL still says where it went. String work
only, no parsing library, no I/O; it runs anywhere (Python 3.9)."""

from __future__ import annotations

import re

MASK = "***"
# a query parameter's name that holds a secret (case-insensitive, anywhere in the name)
_SECRET_NAME = re.compile(
    r"token|key|secret|passw|pwd|pass$|^pass|auth|signature|^sig$|session|credential|cookie",
    re.IGNORECASE,
)


def secret_name(name: str) -> bool:
    """Whether a query parameter called ``name`` carries a secret."""
    return bool(_SECRET_NAME.search(name))


def redact_url(url: str) -> str:
    """``url`` with its userinfo and secret-looking query values replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep:  # no authority: nothing before an '@' is a host's credentials
        scheme, rest = "", url
    cut = len(rest)
    for mark in "/?#":
        found = rest.find(mark)
        if found != -1:
            cut = min(cut, found)
    authority, tail = rest[:cut], rest[cut:]
    if "@" in authority:
        authority = MASK + "@" + authority.rpartition("@")[2]
    head = f"{scheme}{sep}{authority}" if sep else authority
    return head + _redact_tail(tail)


def _redact_tail(tail: str) -> str:
    """The path, query and fragment: secret query values masked."""
    before, hash_mark, fragment = tail.partition("#")
    path, question, query = before.partition("?")
    if not question:
        return tail
    kept = []
    for item in query.split("&"):
        name, equals, value = item.partition("=")
        kept.append(f"{name}={MASK}" if equals and value and secret_name(name) else item)
    return f"{path}?{'&'.join(kept)}{hash_mark}{fragment}"
