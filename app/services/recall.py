"""Recall: hybrid search in the index, then the composite score (docs/architecture.md §3).

A search is a pipeline over one `SearchSpec` (`app.services.search`): rewrite the query,
retrieve candidates, score them, then any further stages, then cut to `top_k`.
The index returns two candidate lists (dense and sparse, one batched query, each hit with
its payload and the query's cosines with its vectors, or the vectors themselves); `Score`
fuses them and computes the calibrated relevance reported as `semantic`. Recency and
importance come from the point payload, so a recall costs one embedding and one index
round trip. Reinforcement (of the results that count as
used, `reinforcement.counts_as_use`, and of an agent's feedback) is counted in memory and
flushed in batches about once a second, off the request's path: many recalls of the same
memory cost one write and one `reinforced` audit event (docs/forgetting.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from datetime import datetime

from app.core import reinforcement, terms
from app.core.audit import AuditEvent
from app.core.clock import Clock, utc_now
from app.core.rewrite import Rewrite
from app.errors import SessionNotFound
from app.providers.embeddings import Embedder
from app.schemas.common import LLMUsage
from app.schemas.forgetting import FeedbackAccepted, FeedbackRequest
from app.schemas.recall import RecallRequest, RecallResponse
from app.services.search import (
    Found,
    NewerFactsFirst,
    Pool,
    Rewriter,
    Score,
    ScoreConfig,
    SearchSpec,
    Stage,
    no_rewrite,
    run_stages,
    states_change,
    to_result,
)
from app.stores import memories as memory_store
from app.stores import sessions as session_store
from app.stores.db import Database
from app.stores.vectors import PayloadPatch, VectorIndex, VectorQuery

log = logging.getLogger("strata.recall")


@dataclasses.dataclass(frozen=True, slots=True)
class RecallConfig:
    """The settings recall reads (app/settings.py; built in app/wiring.py)."""

    score: ScoreConfig  # its scoring's, `candidate_pool` the index is asked for too
    reinforce_min_relevance: float  # a result reinforces its memory from this relevance up


class RecallService:
    def __init__(
        self,
        db: Database,
        vectors: VectorIndex,
        embedder: Embedder,
        config: RecallConfig,
        *,
        rewriter: Rewriter = no_rewrite,
        stages: Sequence[Stage] = (),
        clock: Clock = utc_now,
    ) -> None:
        self.db = db
        self.vectors = vectors
        self.embedder = embedder
        self.config = config
        self.rewriter = rewriter
        self.score = Score(config.score)
        self.stages = list(stages)  # after scoring, in order; docs/seams.md
        # Change promotion's comparisons are made by the index in the retrieval's own call,
        # at the stage's threshold; without the stage, none are asked for.
        self._changes = next((s for s in self.stages if isinstance(s, NewerFactsFirst)), None)
        self.clock = clock
        self._pending: dict[tuple[str, str], _Counts] = {}
        self._flusher: asyncio.Task[None] | None = None
        # The user's highest access count normalises importance; a few seconds stale is fine.
        self._max_access: dict[tuple[str, str], tuple[float, int]] = {}
        self._max_access_reads: dict[tuple[str, str], asyncio.Future[int]] = {}
        self._query_vectors: OrderedDict[str, list[float]] = OrderedDict()

    async def recall(self, tenant_id: str, body: RecallRequest) -> RecallResponse:
        start = time.perf_counter()
        if body.session_id is not None:
            async with self.db.read() as tx:
                session = await session_store.get(tx, tenant_id, body.user_id, body.session_id)
            if session is None:
                raise SessionNotFound(body.session_id)
        found = await self.search(SearchSpec.from_request(tenant_id, body))
        if body.reinforce and body.as_of is None and found.used:  # a replay changes nothing
            self.reinforce_later(
                tenant_id, body.user_id, [r.id for r in found.results if r.id in found.used]
            )
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
        floor = max(spec.min_relevance, self.config.reinforce_min_relevance)
        return Found(
            [to_result(c) for c in ranked],
            rewritten.rewritten if rewritten is not None else None,
            rewritten.usage if rewritten is not None else None,
            used=frozenset(
                c.hit.id
                for c in ranked
                if c.hit.payload.kind == "memory"
                and reinforcement.counts_as_use(c.semantic, c.own, floor)
            ),
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
                limit=max(spec.top_k, self.config.score.candidate_pool),
                memory_types=list(spec.memory_types) if spec.memory_types else None,
                kinds=list(kinds),
                created_from=spec.created_from.timestamp() if spec.created_from else None,
                created_to=upper.timestamp() if upper else None,
                metadata=dict(spec.metadata),
                source_sessions=spec.session_ids,
                # Facts that had ended by then (superseded, contradicted) are not recalled;
                # with `as_of` before the change, the old fact is (docs/facts.md).
                valid_at=(spec.as_of or self.clock()).timestamp(),
                # Change promotion's comparisons, made by the index in the same call
                # (`NewerFactsFirst`, which a question about a period skips).
                compare_turns=(
                    states_change
                    if self._changes is not None and not spec.asks_about_a_period()
                    else None
                ),
                turn_similarity=self._changes.min_similarity if self._changes else 1.0,
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
        vector = (await self.embedder.embed([query], query=True))[0]
        self._query_vectors[query] = vector
        if len(self._query_vectors) > QUERY_CACHE_SIZE:
            self._query_vectors.popitem(last=False)
        return vector

    async def _max_access_count(self, tenant_id: str, user_id: str) -> int:
        """Read from SQL once per user per `MAX_ACCESS_TTL_SECONDS`, by one request (the
        others of that moment await the same read): not a query per recall. This
        process's own reinforcement raises the cached value as it writes (`flush`)."""
        key = (tenant_id, user_id)
        cached = self._max_access.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        reading = self._max_access_reads.get(key)
        if reading is None:
            reading = asyncio.ensure_future(self._read_max_access(tenant_id, user_id))
            self._max_access_reads[key] = reading
            reading.add_done_callback(lambda _: self._max_access_reads.pop(key, None))
        return await asyncio.shield(reading)

    async def _read_max_access(self, tenant_id: str, user_id: str) -> int:
        async with self.db.read() as tx:
            value = await memory_store.max_access_count(tx, tenant_id, user_id)
        if len(self._max_access) > 10_000:
            self._max_access.clear()
        self._max_access[(tenant_id, user_id)] = (time.monotonic() + MAX_ACCESS_TTL_SECONDS, value)
        return value

    def _raise_max_access(
        self, tenant_id: str, user_id: str, uses: Iterable[reinforcement.Use]
    ) -> None:
        cached = self._max_access.get((tenant_id, user_id))
        if cached is not None:
            top = max((u.access_count for u in uses), default=0)
            self._max_access[(tenant_id, user_id)] = (cached[0], max(cached[1], top))

    async def feedback(self, tenant_id: str, body: FeedbackRequest) -> FeedbackAccepted:
        """An agent's word on what it used: counted like recalls (batched), reported back
        with the ids that are not the user's live memories."""
        asked = list(dict.fromkeys([*body.used, *body.useless]))
        async with self.db.read() as tx:
            live = await memory_store.live_ids(tx, tenant_id, body.user_id, asked)
        used = [i for i in body.used if i in live]
        useless = [i for i in body.useless if i in live]
        if used or useless:
            self.reinforce_later(tenant_id, body.user_id, used, useless)
        return FeedbackAccepted(
            accepted=len(used) + len(useless), ignored=[i for i in asked if i not in live]
        )

    def reinforce_later(
        self,
        tenant_id: str,
        user_id: str,
        ids: Sequence[uuid.UUID],
        useless: Sequence[uuid.UUID] = (),
    ) -> None:
        """Count a use of each of `ids` (and a useless result for each of `useless`);
        written by the next flush. A failed flush keeps its counts for the one after; it
        never fails the recall that caused it."""
        pending = self._pending.setdefault((tenant_id, user_id), _Counts())
        pending.used.update(ids)
        pending.useless.update(useless)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        # Counts that arrive while a flush runs are written by the next round of this loop.
        while self._pending:
            await asyncio.sleep(REINFORCE_FLUSH_SECONDS)
            if not await self.flush():
                return  # the store is failing: the next recall starts a new flusher

    async def flush(self) -> bool:
        """Write the pending counts, one `reinforced` audit event per memory per flush;
        returns False if some had to be kept for later."""
        pending, self._pending = self._pending, {}
        now = self.clock()
        ok = True
        try:
            while pending:
                (tenant_id, user_id), counts = next(iter(pending.items()))
                try:
                    async with self.db.transaction() as tx:
                        ids = list(set(counts.used) | set(counts.useless))
                        before = await memory_store.lock_use(tx, tenant_id, user_id, ids)
                        new = {mid: _counted(use, counts, mid, now) for mid, use in before.items()}
                        await memory_store.save_use(tx, tenant_id, user_id, new)
                        await memory_store.add_events(
                            tx,
                            [
                                _reinforced(tenant_id, user_id, mid, before[mid], use, counts, now)
                                for mid, use in new.items()
                            ],
                        )
                except Exception:
                    log.warning("reinforcement of %d memories failed", len(counts), exc_info=True)
                    ok = False
                    break  # the store is failing; keep everything for a later flush
                del pending[(tenant_id, user_id)]
                self._raise_max_access(tenant_id, user_id, new.values())
                try:
                    await self.vectors.set_payload(
                        [
                            (
                                mid,
                                PayloadPatch(
                                    access_count=use.access_count,
                                    last_accessed_at=use.last_accessed_at,
                                ),
                            )
                            for mid, use in new.items()
                        ]
                    )
                except Exception:  # the rows hold the counts; the index's copy lags a recall
                    log.warning("index update after reinforcement failed", exc_info=True)
        finally:
            # Whatever was not written (failure, cancellation) waits for the next flush.
            for key, counts in pending.items():
                into = self._pending.setdefault(key, _Counts())
                into.used.update(counts.used)
                into.useless.update(counts.useless)
        return ok

    async def drain(self) -> None:
        """Write pending reinforcement now (shutdown, tests)."""
        flusher = self._flusher
        if flusher is not None and not flusher.done():
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
        await self.flush()


@dataclasses.dataclass(slots=True)
class _Counts:
    """A user's uses not yet written: by memory, how often used and how often useless."""

    used: Counter[uuid.UUID] = dataclasses.field(default_factory=Counter)
    useless: Counter[uuid.UUID] = dataclasses.field(default_factory=Counter)

    def __len__(self) -> int:
        return len(set(self.used) | set(self.useless))


def _counted(
    use: reinforcement.Use, counts: _Counts, mid: uuid.UUID, now: datetime
) -> reinforcement.Use:
    if counts.used[mid]:
        use = reinforcement.after_recalls(use, counts.used[mid], now)
    if counts.useless[mid]:
        use = reinforcement.after_useless(use, counts.useless[mid])
    return use


def _reinforced(
    tenant_id: str,
    user_id: str,
    mid: uuid.UUID,
    old: reinforcement.Use,
    new: reinforcement.Use,
    counts: _Counts,
    now: datetime,
) -> AuditEvent:
    """One event for everything one flush counted of one memory."""
    used, useless = counts.used[mid], counts.useless[mid]
    parts = [f"used {used}×"] if used else []
    if useless:
        parts.append(f"useless {useless}×")
    return AuditEvent(
        tenant_id,
        user_id,
        mid,
        "reinforced",
        old={"access_count": old.access_count, "strength": old.strength},
        new={"access_count": new.access_count, "strength": new.strength},
        reason=", ".join(parts) + " since the last flush",
        at=now,
    )


MAX_ACCESS_TTL_SECONDS = 5.0
QUERY_CACHE_SIZE = 1024
REINFORCE_FLUSH_SECONDS = 1.0
