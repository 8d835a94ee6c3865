"""The short-term buffer (L2): each session's recent window of messages and its scratchpad
(working memory), in Redis.

The window is a sorted set scored by `seq`, so concurrent ingests that push out of order
still read back in order, and a replayed push is a no-op. The scratchpad is one JSON string
next to it. Keys are hash-tagged per session (`{tenant/user/session}`, each id escaped
by `app.core.keys`, so no two sessions share a key) for Redis Cluster, and
the two share one TTL: any activity on either refreshes both. Losing Redis loses no message:
the window is rebuilt from the message log when it is missing or behind. The scratchpad is
working memory only: lost, it reads back empty.

Every Redis failure leaves this module as `BufferUnavailable`, so that a caller that can do
without the buffer catches exactly that, and one that cannot answers a 503. Calls have short
time-outs, and after a failure the `Breaker` skips Redis for a retry window: a frozen Redis
costs one time-out per window, not one per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from app.core import keys
from app.errors import BufferUnavailable
from app.stores.purged import Purged


def pubsub_channel(redis: Redis | None, name: str) -> str:
    """A pub/sub channel of this deployment. Pub/sub is one namespace for the whole Redis
    server, whatever the database, so the channel carries the database number: two
    deployments on one server (or two test runs) would otherwise end each other's pauses and,
    worse, tell a waiting request that a like-named session of the other was indexed."""
    db = 0 if redis is None else redis.connection_pool.connection_kwargs.get("db", 0)
    return f"strata:{db}:{name}"


WAKE = "wake"
# A wake-up for which a request waits (`Signals.hurry`), tagged with this process, whose
# own worker set its flag directly and ignores the echo (an extra, empty pass otherwise).
URGENT_WAKE = b"2:" + os.urandom(6).hex().encode()
# The change marks' lifetime (app/stores/generations.py, which imports this module).
GENERATION_TTL_SECONDS = 86_400


@dataclass(frozen=True, slots=True)
class _Rewrite:
    """A rewrite of one of Redis's files, and the INFO persistence fields that follow it."""

    command: tuple[str, ...]
    counter: str  # completed rewrites (Redis 7.0+)
    busy: tuple[str, ...]  # running or scheduled
    status: str  # the last one's outcome


_AOF = _Rewrite(
    ("BGREWRITEAOF",),
    "aof_rewrites",
    ("aof_rewrite_in_progress", "aof_rewrite_scheduled"),
    "aof_last_bgrewrite_status",
)
_RDB = _Rewrite(
    ("BGSAVE", "SCHEDULE"), "rdb_saves", ("rdb_bgsave_in_progress",), "rdb_last_bgsave_status"
)


def _window_key(tenant_id: str, user_id: str, session_id: str) -> str:
    return keys.window_key(tenant_id, user_id, session_id)


def _scratchpad_key(tenant_id: str, user_id: str, session_id: str) -> str:
    return keys.scratchpad_key(tenant_id, user_id, session_id)


class Breaker:
    """Skips Redis for `retry_seconds` after a failure, so that callers degrade to the log
    at once instead of each waiting out a time-out; then the next call tries Redis again."""

    def __init__(self, retry_seconds: float) -> None:
        self.retry_seconds = retry_seconds
        self._skip_until = 0.0

    @property
    def open(self) -> bool:
        """True while Redis is being skipped."""
        return time.monotonic() < self._skip_until

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Redis's errors, and the socket's own that redis-py lets through, as ours."""
        if self.open:
            raise BufferUnavailable("the buffer is skipped after a failure; retrying soon")
        try:
            yield
        except (RedisError, OSError) as exc:  # OSError: ConnectionError, TimeoutError, gaierror
            self._skip_until = time.monotonic() + self.retry_seconds
            # The class only (the message names hosts); the handler logs the cause.
            raise BufferUnavailable(f"the buffer failed ({type(exc).__name__})") from exc


class Buffer:
    def __init__(
        self, redis: Redis, *, window: int, ttl_seconds: int, breaker: Breaker | None = None
    ) -> None:
        self.redis = redis
        self.wake_channel = pubsub_channel(redis, WAKE)
        self.window = window
        self.ttl = ttl_seconds
        self.breaker = breaker or Breaker(0.0)
        self._unavailable = self.breaker.guard

    async def push(
        self,
        tenant_id: str,
        user_id: str,
        session_id: str,
        messages: Sequence[dict[str, Any]],
        *,
        wake: bool = False,
        urgent: bool = False,
    ) -> None:
        """Add messages (each with `seq`), keep the newest `window`, refresh the TTL, and
        with `wake` tell the workers (`urgent`: a request waits for the index, see
        `app.stores.signals`), all in one round trip."""
        if not messages:
            return
        key = _window_key(tenant_id, user_id, session_id)
        mapping: dict[bytes, float] = {orjson.dumps(m): m["seq"] for m in messages[-self.window :]}
        with self._unavailable():
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.zadd(key, mapping)
                pipe.zremrangebyrank(key, 0, -(self.window + 1))
                pipe.expire(key, self.ttl)
                pipe.expire(_scratchpad_key(tenant_id, user_id, session_id), self.ttl)
                if wake:
                    pipe.publish(self.wake_channel, URGENT_WAKE if urgent else b"1")
                await pipe.execute()

    async def replace(
        self, tenant_id: str, user_id: str, session_id: str, messages: Sequence[dict[str, Any]]
    ) -> None:
        """Rebuild the window from the log."""
        key = _window_key(tenant_id, user_id, session_id)
        with self._unavailable():
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.delete(key)
                if messages:
                    pipe.zadd(key, {orjson.dumps(m): m["seq"] for m in messages[-self.window :]})
                    pipe.expire(key, self.ttl)
                pipe.expire(_scratchpad_key(tenant_id, user_id, session_id), self.ttl)
                await pipe.execute()

    async def recent(
        self, tenant_id: str, user_id: str, session_id: str, n: int
    ) -> list[dict[str, Any]]:
        """Up to `n` newest messages, oldest first; refreshes the TTL (activity)."""
        key = _window_key(tenant_id, user_id, session_id)
        with self._unavailable():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.zrange(key, -n, -1)
                pipe.expire(key, self.ttl)
                pipe.expire(_scratchpad_key(tenant_id, user_id, session_id), self.ttl)
                raw, *_ = await pipe.execute()
        return [orjson.loads(item) for item in raw]

    async def drop(self, tenant_id: str, user_id: str, session_id: str) -> None:
        """The session's window and scratchpad."""
        with self._unavailable():
            await self.redis.delete(
                _window_key(tenant_id, user_id, session_id),
                _scratchpad_key(tenant_id, user_id, session_id),
            )

    async def drop_sessions(self, tenant_id: str, user_id: str, session_ids: Sequence[str]) -> int:
        """Every session's window and scratchpad (erasure); how many keys there were."""
        if not session_ids:
            return 0
        names = [
            k
            for sid in session_ids
            for k in (
                _window_key(tenant_id, user_id, sid),
                _scratchpad_key(tenant_id, user_id, sid),
            )
        ]
        return await self._delete_each(names)

    async def drop_user(self, tenant_id: str, user_id: str) -> int:
        """Every key naming the user, whatever wrote it (erasure's last step): their
        sessions' windows and scratchpads, and their change mark for context's cached reads
        (app/stores/generations.py); how many there were. A SCAN of the keyspace: erasure
        is rare, and a key left behind would name the user. Everyone's change mark then
        moves on: a read cached before the user's mark first existed would otherwise pass
        for current again once it is gone."""
        found: list[str | bytes] = []
        with self._unavailable():
            for pattern in keys.user_key_patterns(tenant_id, user_id):
                async for key in self.redis.scan_iter(match=pattern, count=1000):
                    found.append(key)
        removed = await self._delete_each(found)
        with self._unavailable():
            await self.redis.set(
                keys.GENERATION_EVERYONE, os.urandom(16).hex(), ex=GENERATION_TTL_SECONDS
            )
        return removed

    async def _delete_each(self, names: Sequence[str | bytes]) -> int:
        if not names:
            return 0
        with self._unavailable():
            # One key per call: hash tags put a session's keys, not several sessions', in
            # one Redis Cluster slot.
            async with self.redis.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.delete(name)
                removed = await pipe.execute()
        return sum(int(n) for n in removed)

    async def snapshot(
        self, tenant_id: str, user_id: str, session_id: str
    ) -> tuple[list[bytes], bytes | None]:
        """The session's window (oldest first) and scratchpad as stored, without refreshing
        their TTL: reading them for an export is not activity."""
        with self._unavailable():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.zrange(_window_key(tenant_id, user_id, session_id), 0, -1)
                pipe.get(_scratchpad_key(tenant_id, user_id, session_id))
                window, pad = await pipe.execute()
        return list(window), pad if isinstance(pad, bytes) else None

    async def read_scratchpad(self, tenant_id: str, user_id: str, session_id: str) -> bytes | None:
        """The scratchpad as stored (None when there is none); refreshes the session's TTL."""
        key = _scratchpad_key(tenant_id, user_id, session_id)
        with self._unavailable():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.get(key)
                pipe.expire(key, self.ttl)
                pipe.expire(_window_key(tenant_id, user_id, session_id), self.ttl)
                raw, *_ = await pipe.execute()
        return raw if isinstance(raw, bytes) else None

    async def write_scratchpad(
        self, tenant_id: str, user_id: str, session_id: str, value: bytes
    ) -> None:
        """Replace the scratchpad, with the session's TTL (refreshing the window's too)."""
        with self._unavailable():
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.set(_scratchpad_key(tenant_id, user_id, session_id), value, ex=self.ttl)
                pipe.expire(_window_key(tenant_id, user_id, session_id), self.ttl)
                await pipe.execute()

    async def drop_scratchpad(self, tenant_id: str, user_id: str, session_id: str) -> None:
        with self._unavailable():
            await self.redis.delete(_scratchpad_key(tenant_id, user_id, session_id))

    async def purge(self, wait_seconds: float) -> Purged:
        """After an erasure: Redis's files no longer hold the deleted keys (docs/privacy.md,
        "What stays on disk"). An RDB snapshot or an AOF written before the erasure holds
        them until the next: with persistence on, a rewrite of each (`BGREWRITEAOF`,
        `BGSAVE`) that starts after this call is waited for. Persistence off: nothing to
        do. A Redis that refuses `CONFIG` (managed services): not known, said so."""
        deadline = time.monotonic() + wait_seconds
        with self._unavailable():
            try:
                config = {
                    **await self.redis.config_get("save"),
                    **await self.redis.config_get("appendonly"),
                }
            except ResponseError as exc:
                return Purged(False, f"Redis refused CONFIG GET ({exc}): its files are not known")
        rewrites = []
        if str(config.get("appendonly", "no")) == "yes":
            rewrites.append(_AOF)
        if config.get("save"):
            rewrites.append(_RDB)
        for rewrite in rewrites:
            failed = await self._rewrite(rewrite, deadline)
            if failed:
                return Purged(False, failed)
        return Purged(True)

    async def _rewrite(self, rewrite: _Rewrite, deadline: float) -> str | None:
        """One rewrite that starts after the call, done; or why it could not be."""
        while True:
            with self._unavailable():
                # In a transaction Redis schedules the rewrite for when no other child
                # runs, and the counter read with it is the one its completion moves on.
                async with self.redis.pipeline(transaction=True) as pipe:
                    pipe.info("persistence")
                    pipe.execute_command(*rewrite.command)
                    info, reply = await pipe.execute(raise_on_error=False)
            if not isinstance(reply, Exception):
                break
            if "already in progress" not in str(reply):  # refused (ACL, a managed Redis)
                return f"Redis refused {' '.join(rewrite.command)} ({reply})"
            await self._until(deadline, rewrite)  # one begun before us does not count
        if rewrite.counter not in info:
            return f"Redis before 7.0 does not tell when {rewrite.command[0]} is done"
        info = await self._until(deadline, rewrite, after=int(info[rewrite.counter]))
        if info[rewrite.status] != "ok":
            return f"{rewrite.command[0]} failed ({rewrite.status}: {info[rewrite.status]})"
        return None

    async def _until(
        self, deadline: float, rewrite: _Rewrite, *, after: int = -1
    ) -> dict[str, Any]:
        """INFO persistence once none of `rewrite`'s kind is running or scheduled, and
        more than `after` of them have completed."""
        while True:
            with self._unavailable():
                info: dict[str, Any] = await self.redis.info("persistence")
            busy = any(int(info.get(flag, 0)) for flag in rewrite.busy)
            if not busy and int(info.get(rewrite.counter, 0)) > after:
                return info
            if time.monotonic() > deadline:
                raise BufferUnavailable(f"{rewrite.command[0]} did not finish in time")
            await asyncio.sleep(0.05)

    async def ping(self) -> float:
        start = time.perf_counter()
        with self._unavailable():
            await self.redis.ping()
        return (time.perf_counter() - start) * 1000

    async def close(self) -> None:
        await self.redis.aclose()
