"""Recall: hybrid search in the index, then the composite score of DESIGN §4.1.

Qdrant fuses the dense and sparse candidate lists (RRF); the fused score, normalised to
[0, 1], is the `semantic` term. Recency and importance come from the point payload, so a
recall costs one embedding and one index query. Reinforcement is counted in memory and
flushed in batches about once a second, off the request's path: many recalls of the same
memory cost one write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime

from app.core import reinforcement, scoring, terms
from app.errors import NotFound
from app.providers.embeddings import Embedder
from app.schemas.common import Source
from app.schemas.recall import RecallRequest, RecallResponse, RecallResult, Scores
from app.settings import Settings
from app.stores import memories as memory_store
from app.stores import sessions as session_store
from app.stores.db import Database
from app.stores.vectors import PayloadPatch, VectorHit, VectorIndex, VectorQuery

log = logging.getLogger("strata.recall")


class RecallService:
    def __init__(
        self, db: Database, vectors: VectorIndex, embedder: Embedder, settings: Settings
    ) -> None:
        self.db = db
        self.vectors = vectors
        self.embedder = embedder
        self.settings = settings
        self._pending: dict[tuple[str, str], Counter[uuid.UUID]] = {}
        self._flusher: asyncio.Task[None] | None = None
        # The user's highest access count normalises importance; a few seconds stale is fine.
        self._max_access: dict[tuple[str, str], tuple[float, int]] = {}
        self._query_vectors: OrderedDict[str, list[float]] = OrderedDict()

    def default_weights(self) -> scoring.Weights:
        s = self.settings
        return scoring.Weights(s.weight_semantic, s.weight_recency, s.weight_importance)

    async def recall(self, tenant_id: str, body: RecallRequest) -> RecallResponse:
        start = time.perf_counter()
        if body.session_id is not None:
            async with self.db.read() as tx:
                session = await session_store.get(tx, tenant_id, body.session_id)
            if session is None or session.user_id != body.user_id:
                raise NotFound(
                    f"no session {body.session_id!r} for this user", code="session_not_found"
                )
        results = await self.search(
            tenant_id,
            body.user_id,
            body.query,
            top_k=body.top_k,
            memory_types=list(body.memory_types) if body.memory_types else None,
            kinds=list(body.kinds) if body.kinds else None,
            created_from=body.time_range.from_ if body.time_range else None,
            created_to=body.time_range.to if body.time_range else None,
            metadata=body.metadata or {},
            weights=scoring.Weights(
                body.weights.semantic, body.weights.recency, body.weights.importance
            )
            if body.weights
            else None,
            as_of=body.as_of,
        )
        if body.reinforce and body.as_of is None and results:  # a replay changes nothing
            self.reinforce_later(tenant_id, body.user_id, [r.id for r in results])
        return RecallResponse(
            query=body.query,
            rewritten_query=None,
            results=results,
            took_ms=round((time.perf_counter() - start) * 1000, 3),
        )

    async def search(
        self,
        tenant_id: str,
        user_id: str,
        query: str,
        *,
        top_k: int,
        memory_types: list[str] | None = None,
        kinds: list[str] | None = None,
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        metadata: dict[str, str | int | bool] | None = None,
        weights: scoring.Weights | None = None,
        as_of: datetime | None = None,
    ) -> list[RecallResult]:
        if kinds is not None and "memory" not in kinds:
            return []  # summaries arrive with hierarchical summarisation
        s = self.settings
        upper = created_to
        if as_of is not None:
            upper = min(upper, as_of) if upper is not None else as_of
        dense_task = asyncio.ensure_future(self._embed_query(query))
        max_access = await self._max_access_count(tenant_id, user_id)
        dense = await dense_task
        hits = await self.vectors.search(
            VectorQuery(
                tenant_id=tenant_id,
                user_id=user_id,
                dense=dense,
                sparse=terms.query_vector(query),
                limit=max(top_k, s.candidate_pool),
                memory_types=memory_types,
                kinds=kinds,
                created_from=created_from.timestamp() if created_from else None,
                created_to=upper.timestamp() if upper else None,
                metadata=metadata or {},
                dense_weight=s.dense_weight,
                sparse_weight=s.sparse_weight,
                rrf_k=s.rrf_k,
            )
        )
        now = as_of or datetime.now(UTC)
        w = (weights or self.default_weights()).normalised()
        scored = [(self._terms(hit, now, max_access), hit) for hit in hits]
        ranked = sorted(scored, key=lambda item: scoring.combine(w, *item[0]), reverse=True)[:top_k]
        # Only the answers become response objects; the rest of the pool is just numbers.
        return [self._result(hit, terms_, w) for terms_, hit in ranked]

    def _terms(self, hit: VectorHit, now: datetime, max_access: int) -> tuple[float, float, float]:
        """(semantic, recency, importance) of one candidate."""
        s = self.settings
        p = hit.payload
        last = p.last_accessed_at or p.created_at
        semantic = scoring.semantic_from_rrf(hit.score, s.dense_weight, s.sparse_weight, s.rrf_k)
        recency = scoring.recency(now, last, s.recency_lambda_per_day)
        intrinsic = 1.0 if p.pinned else p.importance
        importance = scoring.importance(
            intrinsic, p.access_count, max_access, s.importance_intrinsic_share
        )
        return semantic, recency, importance

    @staticmethod
    def _result(
        hit: VectorHit, terms_: tuple[float, float, float], weights: scoring.Weights
    ) -> RecallResult:
        p = hit.payload
        semantic, recency, importance = terms_
        return RecallResult(
            id=hit.id,
            kind=p.kind,
            memory_type=p.memory_type,
            content=p.content,
            score=round(scoring.combine(weights, semantic, recency, importance), 6),
            scores=Scores(
                semantic=round(semantic, 6),
                recency=round(recency, 6),
                importance=round(importance, 6),
            ),
            created_at=p.created_at,
            last_accessed_at=p.last_accessed_at,
            access_count=p.access_count,
            sources=[Source.model_validate(x) for x in p.sources],
            metadata=p.metadata,
        )

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
