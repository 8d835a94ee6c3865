"""Per-user change marks for context's cached reads (`app.services.context_cache`).

A cached entry remembers the marks it was read under and is used only while they are
unchanged. Each committed write that may change a user's profile or summaries bumps that
user's mark (`app.stores.changes`; a write that could not be placed bumps everyone's),
after its commit.

Embedded, one process holds everything: the marks are counts in a dict. In the full stack
the api processes and the workers share them in Redis: two GETs in one round trip per
context call, and per write that touched a user's profile, facts or summaries a SET of a
fresh random token (never a count: a key evicted or lost with a restart and set again must
not repeat a value some entry holds). So a fact the worker extracts, or a profile another
api process patched, shows on the next call. When Redis cannot be reached, `current`
answers None and the caller reads from SQL, and what this process cached before is never
used again. A bump that fails after its commit (Redis down at that moment, a crash between
the two) ends this process's entries but leaves other processes' as they were until they
expire (`context_cache_seconds`).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.core import keys
from app.errors import BufferUnavailable
from app.stores.buffer import GENERATION_TTL_SECONDS, Breaker
from app.stores.changes import EVERYONE, Scope

log = logging.getLogger("strata.generations")

KEY_TTL_SECONDS = GENERATION_TTL_SECONDS  # a user quiet for a day: "never bumped" again

# (this process's failures, the everyone-generation, the user's). Locally a generation is
# a count (0: never bumped); in Redis a random token, so that a key lost and set again
# (evicted, a restart without persistence) can never repeat a value an entry holds.
Stamp = tuple[int, int | str | None, int | str | None]


def _key(scope: Scope) -> str:
    # Hash-tagged by tenant and user (docs/scaling.md: Redis Cluster), named by the one
    # encoder of keys (app/core/keys.py); everyone's mark has a key no user's can be.
    if scope is None:  # EVERYONE
        return keys.GENERATION_EVERYONE
    return keys.generation_key(*scope)


class Generations:
    def __init__(self, redis: Redis | None, breaker: Breaker) -> None:
        self.redis = redis  # None: one process (embedded), the counters stay in it
        self.breaker = breaker
        self._local: dict[Scope, int] = {}
        # The api's loop and its worker's thread (app/worker.py) both bump: no bump lost.
        self._bumping = threading.Lock()
        # Raised by each failure to read or bump the counters: what this process cached
        # before a bump it could not send, or before an outage it saw, is never used again.
        self._failures = 0

    async def current(self, tenant_id: str, user_id: str) -> Stamp | None:
        """The counters a read of this user's profile and summaries is valid under; None
        when they cannot be known (then nothing may be cached or trusted)."""
        scope = (tenant_id, user_id)
        if self.redis is None:
            return self._failures, self._local.get(EVERYONE, 0), self._local.get(scope, 0)
        try:
            with self.breaker.guard():
                # GETs in one round trip, not an MGET: the keys' slots differ on a Redis
                # Cluster, whose client splits a pipeline by node but refuses a cross-slot
                # MGET.
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.get(_key(EVERYONE))
                    pipe.get(_key(scope))
                    everyone, mine = await pipe.execute()
        except (RedisError, OSError, BufferUnavailable) as exc:
            self._failures += 1
            log.debug("generations unavailable: %r", exc)
            return None
        return self._failures, _str(everyone), _str(mine)

    async def bump(self, scopes: Iterable[Scope]) -> None:
        """After a commit: these users' cached reads are no longer valid. Never raises."""
        found = set(scopes)
        if self.redis is None:
            with self._bumping:
                for scope in found:
                    self._local[scope] = self._local.get(scope, 0) + 1
            return
        try:
            with self.breaker.guard():
                async with self.redis.pipeline(transaction=False) as pipe:
                    for scope in found:
                        pipe.set(_key(scope), uuid.uuid4().hex, ex=KEY_TTL_SECONDS)
                    await pipe.execute()
        except (RedisError, OSError, BufferUnavailable) as exc:
            self._failures += 1
            log.warning(
                "could not announce a change to %d users' context reads (their cached "
                "entries in other processes live out their time): %r",
                len(found),
                exc,
            )


def _str(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
