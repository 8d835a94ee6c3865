"""Per-key token buckets (docs/security.md): in Redis for the full stack, so every api
replica draws from one bucket per key; in the process when embedded (one process by design).

When Redis fails or does not answer within `timeout`, the key is limited by this process's
own bucket (`LocalRateLimiter`) and the log says so, at most once a minute: refusing every
request would turn a cache outage into a full one, and letting every request through would
lift the limit. The failure opens the buffer's `Breaker` (app/stores/buffer.py), shared with
every other Redis caller, so for its retry window the limiter goes to the process's bucket at
once: a frozen Redis costs one time-out per window, not one per request (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Protocol

from redis.asyncio import Redis

from app.core import keys as key_names
from app.core.auth import take_token
from app.errors import BufferUnavailable
from app.stores.buffer import Breaker

log = logging.getLogger("strata.ratelimit")

# KEYS[1] the bucket; ARGV rate (tokens/s), burst. Redis's clock, so replicas agree.
# Returns {allowed 0/1, milliseconds until a token is there}. Same rule as take_token.
_LUA = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil then tokens = burst; ts = now end
local elapsed = now - ts
if elapsed < 0 then elapsed = 0 end
tokens = math.min(burst, tokens + elapsed * rate)
local allowed = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait = math.ceil((1 - tokens) / rate * 1000)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {allowed, wait}
"""


class RateLimiter(Protocol):
    async def take(self, bucket: str, rate: float, burst: int) -> float:
        """0 when the request may go; otherwise the seconds until it may."""
        ...


class LocalRateLimiter:
    """Buckets in this process; the least recently used are dropped past `max_buckets`."""

    def __init__(self, max_buckets: int = 100_000) -> None:
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._max = max_buckets

    async def take(self, bucket: str, rate: float, burst: int) -> float:
        now = time.monotonic()
        tokens, updated = self._buckets.pop(bucket, (float(burst), now))
        allowed, tokens, wait = take_token(tokens, updated, now, rate, burst)
        self._buckets[bucket] = (tokens, now)
        if len(self._buckets) > self._max:
            self._buckets.popitem(last=False)
        return 0.0 if allowed else wait


class RedisRateLimiter:
    def __init__(
        self, redis: Redis, *, breaker: Breaker | None = None, timeout: float = 0.25
    ) -> None:
        self._redis = redis
        self._script = redis.register_script(_LUA)
        self._breaker = breaker or Breaker(0.0)
        self._timeout = timeout
        self._last_warning = 0.0
        # While Redis is away: each process limits each key on its own (so N replicas let
        # through up to N times the rate, never unlimited).
        self._fallback = LocalRateLimiter()

    async def take(self, bucket: str, rate: float, burst: int) -> float:
        try:
            with self._breaker.guard():
                async with asyncio.timeout(self._timeout):
                    allowed, wait_ms = await self._script(
                        keys=[key_names.ratelimit_key(bucket)], args=[repr(rate), burst]
                    )
        except BufferUnavailable as exc:
            now = time.monotonic()
            if now - self._last_warning > 60:
                self._last_warning = now
                log.warning("rate limit checked in this process only, Redis unavailable (%s)", exc)
            return await self._fallback.take(bucket, rate, burst)
        return 0.0 if int(allowed) else int(wait_ms) / 1000
