"""API keys: create (shown once), list, revoke, and authenticate a presented key
(docs/security.md). The gate in `app.api.deps` calls `authenticate` and `limit` on every
/v1 request; the admin endpoints and `python -m app.keys` call the rest.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import SecretStr

from app.core.auth import (
    SCOPES,
    Principal,
    format_scopes,
    new_key,
    parse_scopes,
    parse_token,
    retry_after_seconds,
    same_secret,
    secret_matches,
)
from app.errors import (
    Forbidden,
    InvalidInput,
    KeyNotFound,
    RateLimited,
    Unauthorized,
)
from app.schemas.keys import KeyCreate, KeyCreated, KeyOut, KeyPage, KeyRevoked
from app.services.cursors import encode_cursor, one_id
from app.stores import keys as key_store
from app.stores.db import Database
from app.stores.models import ApiKey
from app.stores.ratelimit import RateLimiter

log = logging.getLogger("strata.keys")

AuthMode = Literal["keys", "open", "loopback"]
"""keys: a key on every /v1 request; open: none asked (explicit); loopback: none asked, and
only callers on this machine answered (the embedded default with no key anywhere)."""

_CACHE_SIZE = 10_000


@dataclass(frozen=True, slots=True)
class KeyConfig:
    """The settings the keys read (app/settings.py; built in app/wiring.py)."""

    auth_mode: Literal["keys", "open"] | None
    api_key: SecretStr | None
    admin_key: SecretStr | None
    default_tenant: str
    key_cache_seconds: float
    rate_limit_per_second: float
    rate_limit_burst: int
    is_sqlite: bool


@dataclass(frozen=True, slots=True)
class _Cached:
    key: ApiKey | None  # None: no such key (cached too, so a flood of made-up ids stays cheap)
    until: float


def key_out(row: ApiKey) -> KeyOut:
    return KeyOut(
        id=row.id,
        tenant=row.tenant_id,
        name=row.name,
        scopes=sorted(parse_scopes(row.scopes), key=SCOPES.index),
        user_id=row.user_id,
        rate_limit_per_second=row.rate_limit_per_second,
        rate_limit_burst=row.rate_limit_burst,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


class KeyService:
    def __init__(self, db: Database, config: KeyConfig, limiter: RateLimiter) -> None:
        self.db = db
        self.config = config
        self.limiter = limiter
        self.mode: AuthMode = "keys"
        self._cache: OrderedDict[uuid.UUID, _Cached] = OrderedDict()

    # Start-up.

    async def resolve_mode(self) -> AuthMode:
        """Decide how this server authenticates, once at start; refuse a configuration that
        would serve the full stack without keys by accident."""
        s = self.config
        configured = s.api_key is not None or s.admin_key is not None
        if s.auth_mode == "open":
            self.mode = "open"
            log.warning(
                "auth_mode=open: no API keys are checked; every caller is tenant %r with every "
                "scope",
                s.default_tenant,
            )
            return self.mode
        if configured or await self._active_keys() > 0:
            self.mode = "keys"
            return self.mode
        if s.auth_mode == "keys" or not s.is_sqlite:
            raise RuntimeError(
                "Strata requires API keys here, and none is configured: set STRATA_ADMIN_KEY "
                "(then create keys at /v1/admin/keys), or STRATA_API_KEY (one key, every "
                "scope), or create one with `python -m app.keys create --tenant T`; "
                "STRATA_AUTH_MODE=open serves without keys"
            )
        self.mode = "loopback"
        log.warning(
            "no API key is configured: the API is open, without keys, and answers callers on "
            "this machine (loopback) only; set STRATA_API_KEY or create keys to serve others"
        )
        return self.mode

    async def _active_keys(self) -> int:
        async with self.db.read() as tx:
            return await key_store.count_active(tx)

    # The gate.

    def open_principal(self) -> Principal:
        return Principal(self.config.default_tenant, frozenset(SCOPES), kind="open")

    async def authenticate(self, token: str | None) -> Principal:
        """The caller a presented key stands for; Unauthorized when it stands for none."""
        if not token:
            raise Unauthorized("send `Authorization: Bearer <api key>`")
        s = self.config
        if s.admin_key is not None and same_secret(token, s.admin_key.get_secret_value()):
            return Principal(s.default_tenant, frozenset({"admin"}), kind="admin")
        if s.api_key is not None and same_secret(token, s.api_key.get_secret_value()):
            return Principal(
                s.default_tenant,
                frozenset(SCOPES),
                kind="legacy",
                rate_per_second=s.rate_limit_per_second,
                burst=self._burst(s.rate_limit_per_second, s.rate_limit_burst),
            )
        parsed = parse_token(token)
        if parsed is None:
            raise Unauthorized("the API key is malformed", invalid=True)
        key_id, secret = parsed
        row = await self._lookup(key_id)
        # Unknown and wrong secret answer alike, so an id cannot be confirmed by guessing.
        if row is None or not secret_matches(secret, row.key_hash):
            raise Unauthorized("the API key is not valid", invalid=True)
        if row.revoked_at is not None:
            raise Unauthorized("the API key was revoked", invalid=True)
        rate = row.rate_limit_per_second
        if rate is None:
            rate = s.rate_limit_per_second
        return Principal(
            row.tenant_id,
            parse_scopes(row.scopes),
            user_id=row.user_id,
            key_id=row.id,
            kind="key",
            rate_per_second=rate,
            burst=self._burst(rate, row.rate_limit_burst or s.rate_limit_burst),
        )

    @staticmethod
    def _burst(rate: float, burst: int) -> int:
        return burst if burst > 0 else max(1, int(rate * 2))

    async def limit(self, principal: Principal) -> None:
        """RateLimited when the caller's bucket is empty; nothing when it has no limit."""
        if principal.rate_per_second <= 0:
            return
        wait = await self.limiter.take(principal.bucket, principal.rate_per_second, principal.burst)
        if wait > 0:
            raise RateLimited(retry_after_seconds(wait))

    async def _lookup(self, key_id: uuid.UUID) -> ApiKey | None:
        now = time.monotonic()
        cached = self._cache.get(key_id)
        if cached is not None and cached.until > now:
            return cached.key
        async with self.db.read() as tx:
            row = await key_store.find(tx, key_id)
        ttl = self.config.key_cache_seconds
        if ttl > 0:
            self._cache[key_id] = _Cached(row, now + ttl)
            self._cache.move_to_end(key_id)
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return row

    # Management (the admin endpoints and the CLI).

    def managed_tenant(self, caller: Principal, requested: str | None) -> str | None:
        """The tenant whose keys `caller` manages in this request: the operator any (None:
        every tenant's, for a listing), a tenant's admin key its own only."""
        if caller.operator:
            return requested
        if requested is not None and requested != caller.tenant_id:
            raise Forbidden("a tenant's admin key manages the keys of its own tenant only")
        return caller.tenant_id

    async def create(self, tenant_id: str, body: KeyCreate) -> KeyCreated:
        scopes = parse_scopes(body.scopes)
        if body.user_id is not None and "admin" in scopes:
            raise InvalidInput("scopes", "a key bound to a user cannot hold admin")
        made = new_key()
        now = datetime.now(UTC)
        row = ApiKey(
            id=made.key_id,
            tenant_id=tenant_id,
            key_hash=made.secret_hash,
            created_at=now,
            name=body.name,
            scopes=format_scopes(scopes),
            user_id=body.user_id,
            rate_limit_per_second=body.rate_limit_per_second,
            rate_limit_burst=body.rate_limit_burst,
            revoked_at=None,
        )
        async with self.db.transaction() as tx:
            await key_store.ensure_tenant(tx, tenant_id, now)
            await key_store.insert(tx, row)
        self._cache.pop(made.key_id, None)  # a miss cached for a guessed id must not linger
        log.info("key %s created for tenant %s (scopes %s)", row.id, tenant_id, row.scopes)
        return KeyCreated(**key_out(row).model_dump(), key=made.token)

    async def page(
        self, tenant_id: str | None, cursor: str | None, limit: int, include_revoked: bool
    ) -> KeyPage:
        after = one_id(cursor)
        async with self.db.read() as tx:
            rows = await key_store.page(
                tx, tenant_id, after=after, limit=limit + 1, include_revoked=include_revoked
            )
        more = len(rows) > limit
        rows = rows[:limit]
        return KeyPage(
            items=[key_out(r) for r in rows],
            next_cursor=encode_cursor(str(rows[-1].id)) if more and rows else None,
        )

    async def revoke(self, tenant_id: str | None, key_id: uuid.UUID) -> KeyRevoked:
        """Idempotent: revoking a revoked key answers its first revocation."""
        async with self.db.transaction() as tx:
            row = await key_store.revoke(tx, tenant_id, key_id, datetime.now(UTC))
        if row is None or row.revoked_at is None:
            raise KeyNotFound(key_id)
        self._cache.pop(key_id, None)  # this process stops accepting it at once
        log.info("key %s of tenant %s revoked", key_id, row.tenant_id)
        return KeyRevoked(id=row.id, revoked_at=row.revoked_at)
