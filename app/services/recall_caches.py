"""What recall keeps between requests to save work: the query vectors it embedded (an LRU)
and each user's highest access count (a short TTL, read by one request at a time)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Iterable

from app.core import reinforcement
from app.providers.embeddings import Embedder
from app.stores import memories as memory_store
from app.stores.db import Database

MAX_ACCESS_TTL_SECONDS = 5.0
QUERY_CACHE_SIZE = 1024
_MAX_USERS = 10_000  # users whose count is kept; past it, all are read again


class QueryVectors:
    """Agents ask the same thing more than once (context for the same turn, retries): a
    small LRU saves the embedding, the largest single cost of a recall."""

    def __init__(self, embedder: Embedder, size: int = QUERY_CACHE_SIZE) -> None:
        self.embedder = embedder
        self.size = size
        self._vectors: OrderedDict[str, list[float]] = OrderedDict()

    async def get(self, query: str) -> list[float]:
        cached = self._vectors.get(query)
        if cached is not None:
            self._vectors.move_to_end(query)
            return cached
        vector = (await self.embedder.embed([query], query=True))[0]
        self._vectors[query] = vector
        if len(self._vectors) > self.size:
            self._vectors.popitem(last=False)
        return vector


class MaxAccessCounts:
    """The user's highest access count, which normalises importance: read from SQL once per
    user per `ttl_seconds`, by one request (the others of that moment await the same
    read), not a query per recall; a few seconds stale is fine. This process's own
    reinforcement raises the kept value as it writes (`raise_to`)."""

    def __init__(self, db: Database, ttl_seconds: float = MAX_ACCESS_TTL_SECONDS) -> None:
        self.db = db
        self.ttl_seconds = ttl_seconds
        self._kept: dict[tuple[str, str], tuple[float, int]] = {}  # (expiry, count)
        self._reads: dict[tuple[str, str], asyncio.Future[int]] = {}

    async def get(self, tenant_id: str, user_id: str) -> int:
        key = (tenant_id, user_id)
        kept = self._kept.get(key)
        if kept is not None and kept[0] > time.monotonic():
            return kept[1]
        reading = self._reads.get(key)
        if reading is None:
            reading = asyncio.ensure_future(self._read(tenant_id, user_id))
            self._reads[key] = reading
            reading.add_done_callback(lambda _: self._reads.pop(key, None))
        return await asyncio.shield(reading)

    async def _read(self, tenant_id: str, user_id: str) -> int:
        async with self.db.read() as tx:
            value = await memory_store.max_access_count(tx, tenant_id, user_id)
        if len(self._kept) > _MAX_USERS:
            self._kept.clear()
        self._kept[(tenant_id, user_id)] = (time.monotonic() + self.ttl_seconds, value)
        return value

    def raise_to(self, tenant_id: str, user_id: str, uses: Iterable[reinforcement.Use]) -> None:
        """The kept count raised to the highest of `uses` (just written), if one is kept."""
        kept = self._kept.get((tenant_id, user_id))
        if kept is not None:
            top = max((u.access_count for u in uses), default=0)
            self._kept[(tenant_id, user_id)] = (kept[0], max(kept[1], top))
