"""Per-key token buckets (docs/security.md): in Redis for the full stack, so every api
replica draws from one bucket per key; in the process when embedded (one process by design).

The limiter degrades open: a Redis that fails or does not answer within `timeout` lets the
request through (and says so in the log, at most once a minute), because refusing every
request while Redis is away would turn a cache outage into a full one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.core.auth import take_token

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
    def __init__(self, redis: Redis, *, timeout: float = 0.25) -> None:
        self._redis = redis
        self._script = redis.register_script(_LUA)
        self._timeout = timeout
        self._last_warning = 0.0

    async def take(self, bucket: str, rate: float, burst: int) -> float:
        try:
            async with asyncio.timeout(self._timeout):
                allowed, wait_ms = await self._script(
                    keys=[f"strata:ratelimit:{{{bucket}}}"], args=[repr(rate), burst]
                )
        except (RedisError, OSError, TimeoutError) as exc:
            now = time.monotonic()
            if now - self._last_warning > 60:
                self._last_warning = now
                log.warning("rate limit not checked, Redis failed (%s)", type(exc).__name__)
            return 0.0
        return 0.0 if int(allowed) else int(wait_ms) / 1000
