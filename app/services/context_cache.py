"""Context's per-user cache of the profile and the older summaries.

Both change rarely (a profile patch, a fact extracted, a summary written: minutes to days
apart) and were a third of a context call's CPU at 1k memories: four statements in one
transaction on every call. An entry is keyed by the user and by where the verbatim turns
begin (`before`, which decides the summaries), remembers the per-user change counters it
was read under (`app.stores.generations`), and is used only while they are unchanged and
it is younger than `ttl_seconds`. Reads with `as_of` (a replay of the past) are never
cached. The counters are read before the rows: a write committed in between leaves an
entry that its own bump already ended.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from app.stores.generations import Generations, Stamp

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Entry:
    stamp: Stamp
    expires: float  # on the cache's clock (monotonic)
    value: object
    size: int  # roughly, in bytes (`weigh`)


class ContextCache:
    def __init__(
        self,
        generations: Generations,
        *,
        ttl_seconds: float,
        max_bytes: int,
        weigh: Callable[[Any], int] = lambda _: 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.generations = generations
        self.clock = clock
        self.ttl_seconds = ttl_seconds
        # A user's profile may hold 32 kB of attributes and 100 facts, each up to a long
        # message: the bound is on what the entries hold, not on their number.
        self.max_bytes = max_bytes
        self.weigh = weigh
        self.size = 0
        self._items: OrderedDict[tuple[str, str, datetime], _Entry] = OrderedDict()
        self.hits = 0
        self.misses = 0

    async def get(
        self, tenant_id: str, user_id: str, before: datetime, read: Callable[[], Awaitable[T]]
    ) -> T:
        """The cached value for this user and `before`, or `read()`'s (then kept)."""
        if self.ttl_seconds <= 0:
            return await read()
        stamp = await self.generations.current(tenant_id, user_id)
        if stamp is None:  # the counters cannot be known: trust nothing, keep nothing
            return await read()
        key = (tenant_id, user_id, before)
        entry = self._items.get(key)
        now = self.clock()
        if entry is not None and entry.stamp == stamp and entry.expires > now:
            self._items.move_to_end(key)
            self.hits += 1
            return entry.value  # type: ignore[return-value]
        self.misses += 1
        value = await read()
        size = self.weigh(value)
        if size > self.max_bytes:
            return value  # larger than the whole cache: read each time
        old = self._items.pop(key, None)
        if old is not None:
            self.size -= old.size
        self._items[key] = _Entry(stamp, now + self.ttl_seconds, value, size)
        self.size += size
        while self.size > self.max_bytes:
            _, evicted = self._items.popitem(last=False)
            self.size -= evicted.size
        return value
