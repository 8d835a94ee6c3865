"""The rules of the gate, as pure functions (docs/security.md): what a key looks like, which
scope a request needs, and whether a key bound to a user may make it.

No I/O here: the gate in `app.api.deps` gathers the request's facts and the key, and asks.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import re
import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Scope = Literal["read", "write", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "write", "admin")

TOKEN_PREFIX = "sk_strata_"
_TOKEN = re.compile(r"^sk_strata_([0-9a-f]{32})_([A-Za-z0-9_-]{20,128})$")

SCOPE_MARKER = "x-strata-scope"
"""The OpenAPI extension by which a route declares its scope, where its method would mislead
(a POST that only reads, such as recall): `openapi_extra={SCOPE_MARKER: "read"}`."""

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a tenant, the scopes held, and the one user a bound key may name.

    `operator` is the settings' admin key (or an open server): it manages every tenant's keys.
    """

    tenant_id: str
    scopes: frozenset[str]
    user_id: str | None = None
    key_id: uuid.UUID | None = None
    kind: Literal["key", "legacy", "admin", "open"] = "key"
    rate_per_second: float = 0.0
    burst: int = 0

    @property
    def operator(self) -> bool:
        return self.kind in ("admin", "open")

    @property
    def bucket(self) -> str:
        """The rate limit's bucket: one per key."""
        return str(self.key_id) if self.key_id is not None else self.kind


@dataclass(frozen=True, slots=True)
class NewKey:
    key_id: uuid.UUID
    secret: str
    token: str
    secret_hash: str


def new_key() -> NewKey:
    key_id = uuid.uuid4()
    secret = secrets.token_urlsafe(32)
    return NewKey(key_id, secret, f"{TOKEN_PREFIX}{key_id.hex}_{secret}", hash_secret(secret))


def parse_token(token: str) -> tuple[uuid.UUID, str] | None:
    """(key id, secret) of a well-formed key, else None."""
    match = _TOKEN.match(token)
    if match is None:
        return None
    return uuid.UUID(hex=match.group(1)), match.group(2)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_matches(secret: str, stored_hash: str) -> bool:
    """Constant time in the secret: a mismatch says nothing of where it differs."""
    return hmac.compare_digest(hash_secret(secret).encode(), stored_hash.encode())


def same_secret(given: str, expected: str) -> bool:
    """Constant-time comparison of a presented key with a configured one (hashed first, so
    that not even the length of the configured one shows in the timing)."""
    return hmac.compare_digest(hash_secret(given).encode(), hash_secret(expected).encode())


def parse_scopes(value: str | Iterable[str]) -> frozenset[str]:
    """`read,write` (or an iterable of names) as a set; unknown names are a ValueError.
    write implies read (a writer must see what it wrote)."""
    names = value.split(",") if isinstance(value, str) else list(value)
    scopes = {n.strip() for n in names if n.strip()}
    unknown = scopes - set(SCOPES)
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(sorted(unknown))}; use {', '.join(SCOPES)}")
    if not scopes:
        raise ValueError("at least one scope is needed")
    if "write" in scopes:
        scopes.add("read")
    return frozenset(scopes)


def format_scopes(scopes: Iterable[str]) -> str:
    return ",".join(s for s in SCOPES if s in set(scopes))


def required_scope(method: str, path: str, declared: str | None) -> Scope:
    """admin under /v1/admin; else what the route declares; else read for GET/HEAD and
    write for every other method."""
    if path == "/v1/admin" or path.startswith("/v1/admin/"):
        return "admin"
    if declared in SCOPES:
        return declared
    return "read" if method.upper() in READ_METHODS else "write"


def foreign_users(bound: str, named: Iterable[object]) -> list[str]:
    """The user ids a request names besides the one its key is bound to (anything that is
    not exactly the bound id counts, a number or a list included)."""
    return sorted({repr(n) if not isinstance(n, str) else n for n in named if n != bound})


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return host == "localhost"


def retry_after_seconds(wait: float) -> int:
    """`Retry-After` is whole seconds, at least 1 (0 would invite an immediate retry)."""
    return max(1, math.ceil(wait))


def take_token(
    tokens: float, updated: float, now: float, rate: float, burst: int
) -> tuple[bool, float, float]:
    """One request against a token bucket holding `tokens` at time `updated`: (allowed,
    tokens left, seconds until a token is there when refused). The Redis script in
    `app.stores.ratelimit` is this function in Lua."""
    tokens = min(float(burst), tokens + max(0.0, now - updated) * rate)
    if tokens >= 1.0:
        return True, tokens - 1.0, 0.0
    return False, tokens, (1.0 - tokens) / rate
