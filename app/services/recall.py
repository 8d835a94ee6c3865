"""Recall: hybrid search in the index, then the composite score (docs/architecture.md §3).

A search is a pipeline over one `SearchSpec` (`app.services.search`): rewrite the query,
retrieve candidates, score them, then any further stages, then cut to `top_k`.
The index returns two candidate lists (dense and sparse, one batched query, each hit with
its payload and stored vectors); `Score` fuses them and computes the calibrated relevance
reported as `semantic`. Recency and importance come from the point payload, so a recall
costs one embedding and one index round trip. Reinforcement is counted in memory and
flushed in batches about once a second, off the request's path: many recalls of the same
memory cost one write.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime

from app.core import reinforcement, terms
from app.core.rewrite import Rewrite
from app.errors import SessionNotFound
from app.providers.embeddings import Embedder
from app.schemas.common import LLMUsage
from app.schemas.recall import RecallRequest, RecallResponse
from app.services.search import (
    Found,
    Pool,
    Rewriter,
    Score,
    SearchSpec,
    Stage,
    no_rewrite,
    run_stages,
    to_result,
)
from app.settings import Settings
from app.stores import memories as memory_store
from app.stores import sessions as session_store
from app.stores.db import Database
from app.stores.vectors import PayloadPatch, VectorIndex, VectorQuery

log = logging.getLogger("strata.recall")


class RecallService:
    def __init__(
        self,
        db: Database,
        vectors: VectorIndex,
        embedder: Embedder,
        settings: Settings,
        *,
        rewriter: Rewriter = no_rewrite,
        stages: Sequence[Stage] = (),
    ) -> None:
        self.db = db
        self.vectors = vectors
        self.embedder = embedder
        self.settings = settings
        self.rewriter = rewriter
        self.score = Score(settings)
        self.stages = list(stages)  # after scoring, in order; docs/seams.md
        self._pending: dict[tuple[str, str], Counter[uuid.UUID]] = {}
        self._flusher: asyncio.Task[None] | None = None
        # The user's highest access count normalises importance; a few seconds stale is fine.
        self._max_access: dict[tuple[str, str], tuple[float, int]] = {}
        self._query_vectors: OrderedDict[str, list[float]] = OrderedDict()

    async def recall(self, tenant_id: str, body: RecallRequest) -> RecallResponse:
        start = time.perf_counter()
        if body.session_id is not None:
            async with self.db.read() as tx:
                session = await session_store.get(tx, tenant_id, body.session_id)
            if session is None or session.user_id != body.user_id:
                raise SessionNotFound(body.session_id)
        found = await self.search(SearchSpec.from_request(tenant_id, body))
        if body.reinforce and body.as_of is None and found.results:  # a replay changes nothing
            self.reinforce_later(tenant_id, body.user_id, [r.id for r in found.results])
        return RecallResponse(
            query=body.query,
            rewritten_query=found.rewritten_query,
            results=found.results,
            llm_usage=LLMUsage(**found.llm_usage) if found.llm_usage else None,
            took_ms=round((time.perf_counter() - start) * 1000, 3),
        )

    async def search(self, spec: SearchSpec) -> Found:
        """rewrite → retrieve → score → each of `stages` → the best `top_k`."""
        rewritten = await self.rewrite(spec)
        if rewritten is not None:
            spec = dataclasses.replace(spec, query=rewritten.rewritten)
        candidates = self.score(spec, await self.retrieve(spec))
        ranked = await run_stages(spec, candidates, self.stages)
        return Found(
            [to_result(c) for c in ranked],
            rewritten.rewritten if rewritten is not None else None,
            rewritten.usage if rewritten is not None else None,
        )

    async def rewrite(self, spec: SearchSpec) -> Rewrite | None:
        """The standalone query to search instead of `spec.query`, or None."""
        if spec.rewrite == "off":
            return None
        return await self.rewriter(spec)

    async def retrieve(self, spec: SearchSpec) -> Pool:
        """One embedding and one hybrid index query: the candidate pool."""
        # Summaries are searched only when asked for (`kinds`): a plain recall, and
        # context's, find memories, and context shows summaries in a section of their own.
        kinds = spec.kinds or ("memory",)
        s = self.settings
        upper = spec.created_until()
        dense_task = asyncio.ensure_future(self._embed_query(spec.query))
        max_access = await self._max_access_count(spec.tenant_id, spec.user_id)
        dense = await dense_task
        sparse = terms.query_vector(spec.query)
        lists = await self.vectors.candidates(
            VectorQuery(
                tenant_id=spec.tenant_id,
                user_id=spec.user_id,
                dense=dense,
                sparse=sparse,
                limit=max(spec.top_k, s.candidate_pool),
                memory_types=list(spec.memory_types) if spec.memory_types else None,
                kinds=list(kinds),
                created_from=spec.created_from.timestamp() if spec.created_from else None,
                created_to=upper.timestamp() if upper else None,
                metadata=dict(spec.metadata),
                source_session=spec.session_id if spec.session_scope else None,
                # Facts that had ended by then (superseded, contradicted) are not recalled;
                # with `as_of` before the change, the old fact is (docs/facts.md).
                valid_at=(spec.as_of or datetime.now(UTC)).timestamp(),
            )
        )
        return Pool(lists, max_access, dense, frozenset(sparse.indices))

    async def _embed_query(self, query: str) -> list[float]:
        """Agents ask the same thing more than once (context for the same turn, retries):
        a small LRU saves the embedding, the largest single cost of a recall."""
        cached = self._query_vectors.get(query)
        if cached is not None:
            self._query_vectors.move_to_end(query)
            return cached
        vector = (await self.embedder.embed([query]))[0]
        self._query_vectors[query] = vector
        if len(self._query_vectors) > QUERY_CACHE_SIZE:
            self._query_vectors.popitem(last=False)
        return vector

    async def _max_access_count(self, tenant_id: str, user_id: str) -> int:
        key = (tenant_id, user_id)
        cached = self._max_access.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        async with self.db.read() as tx:
            value = await memory_store.max_access_count(tx, tenant_id, user_id)
        if len(self._max_access) > 10_000:
            self._max_access.clear()
        self._max_access[key] = (time.monotonic() + MAX_ACCESS_TTL_SECONDS, value)
        return value

    def reinforce_later(self, tenant_id: str, user_id: str, ids: Sequence[uuid.UUID]) -> None:
        """Count an access of each memory; written by the next flush. A failed flush keeps
        its counts for the one after; it never fails the recall that caused it."""
        self._pending.setdefault((tenant_id, user_id), Counter()).update(ids)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        # Counts that arrive while a flush runs are written by the next round of this loop.
        while self._pending:
            await asyncio.sleep(REINFORCE_FLUSH_SECONDS)
            if not await self.flush():
                return  # the store is failing: the next recall starts a new flusher

    async def flush(self) -> bool:
        """Write the pending counts; returns False if some had to be kept for later."""
        pending, self._pending = self._pending, {}
        now = datetime.now(UTC)
        ok = True
        try:
            while pending:
                (tenant_id, user_id), counts = next(iter(pending.items()))
                try:
                    async with self.db.transaction() as tx:
                        used = await memory_store.lock_use(tx, tenant_id, user_id, list(counts))
                        new = {
                            mid: reinforcement.after_recalls(use, counts[mid], now)
                            for mid, use in used.items()
                        }
                        await memory_store.save_use(tx, tenant_id, user_id, new)
                except Exception:
                    log.warning("reinforcement of %d memories failed", len(counts), exc_info=True)
                    ok = False
                    break  # the store is failing; keep everything for a later flush
                del pending[(tenant_id, user_id)]
                self._max_access.pop((tenant_id, user_id), None)
                try:
                    await self.vectors.set_payload(
                        [
                            (mid, PayloadPatch(access_count=use.access_count, last_accessed_at=now))
                            for mid, use in new.items()
                        ]
                    )
                except Exception:  # the rows hold the counts; the index's copy lags a recall
                    log.warning("index update after reinforcement failed", exc_info=True)
        finally:
            # Whatever was not written (failure, cancellation) waits for the next flush.
            for key, counts in pending.items():
                self._pending.setdefault(key, Counter()).update(counts)
        return ok

    async def drain(self) -> None:
        """Write pending reinforcement now (shutdown, tests)."""
        flusher = self._flusher
        if flusher is not None and not flusher.done():
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
        await self.flush()


MAX_ACCESS_TTL_SECONDS = 5.0
QUERY_CACHE_SIZE = 1024
REINFORCE_FLUSH_SECONDS = 1.0
