"""Recall: hybrid search in the index, then the composite score (docs/architecture.md §3).

A search is a pipeline over one `SearchSpec` (`app.services.search`): rewrite the query,
retrieve candidates, score them, then any further stages, then cut to `top_k`.
The index returns two candidate lists (dense and sparse, one batched query, each hit with
its payload and the query's cosines with its vectors, or the vectors themselves); `Score`
fuses them and computes the calibrated relevance reported as `semantic`. Recency and
importance come from the point payload, so a recall costs one embedding and one index
round trip (the query vector and the user's highest access count are kept between
requests: `app.services.recall_caches`). Reinforcement (of the results that count as
used, `reinforcement.counts_as_use`, and of an agent's feedback) is written behind, in
batches, by `app.services.reinforcing.Reinforcer` (docs/forgetting.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable, Sequence

from app.core import ranking, reinforcement, terms
from app.core.clock import Clock, utc_now
from app.core.rewrite import Rewrite
from app.errors import SessionNotFound
from app.providers.embeddings import Embedder
from app.schemas.common import LLMUsage
from app.schemas.forgetting import FeedbackAccepted, FeedbackRequest
from app.schemas.recall import RecallRequest, RecallResponse
from app.services.recall_caches import MaxAccessCounts, QueryVectors
from app.services.reinforcing import Reinforcer
from app.services.search import (
    Found,
    HeldTurnsLast,
    NewerFactsFirst,
    Pool,
    Rewriter,
    Score,
    ScoreConfig,
    SearchSpec,
    Stage,
    applies,
    holds,
    no_rewrite,
    run_stages,
    to_results,
)
from app.stores import memories as memory_store
from app.stores import sessions as session_store
from app.stores.db import Database
from app.stores.vectors import MemoryPayload, VectorIndex, VectorQuery


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
        query_vectors: QueryVectors | None = None,
        max_access: MaxAccessCounts | None = None,
        reinforcer: Reinforcer | None = None,
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
        self._held = next((s for s in self.stages if isinstance(s, HeldTurnsLast)), None)
        self.clock = clock
        self.query_vectors = query_vectors or QueryVectors(embedder)
        self.max_access = max_access or MaxAccessCounts(db)
        self.reinforcer = reinforcer or Reinforcer(
            db, vectors, clock=clock, on_written=self.max_access.raise_to
        )

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
        asked = spec.query
        rewritten = await self.rewrite(spec)
        if rewritten is not None:
            spec = dataclasses.replace(spec, query=rewritten.rewritten, held=rewritten.read)
        # The user named by their id ("Ana 住在哪里？" of user "ana") is the user: their turns
        # say I and my.
        if spec.first_person:
            spec = dataclasses.replace(
                spec, query=ranking.in_first_person(spec.query, spec.user_id)
            )
        candidates = self.score(spec, await self.retrieve(spec))
        ranked = await run_stages(spec, candidates, self.stages)
        floor = max(spec.min_relevance, self.config.reinforce_min_relevance)
        return Found(
            to_results(ranked),
            spec.query if rewritten is not None or spec.query != asked else None,
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
        dense_task = asyncio.ensure_future(self.query_vectors.get(spec.query))
        max_access = await self.max_access.get(spec.tenant_id, spec.user_id)
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
                compare_turns=self._compare(spec),
            )
        )
        return Pool(lists, max_access, dense, frozenset(sparse.indices))

    def _compare(self, spec: SearchSpec) -> Callable[[MemoryPayload], float | None] | None:
        """The hits whose similar turns the index finds, and from which cosine: those that
        may replace an older statement (`NewerFactsFirst.compares`) and the conversation's
        turns the rewrite read (`HeldTurnsLast`); a hit that is both at the lower of the two."""
        changes = self._changes.compares(spec) if self._changes else None
        held = self._held.min_similarity if self._held and applies(spec) else None
        if held is None:  # the usual recall: asked of every candidate, so kept to one test
            return changes
        held_floor = held

        def cosine(payload: MemoryPayload) -> float | None:
            floor = held_floor if holds(spec, payload) else None
            change = changes(payload) if changes is not None else None
            if change is None:
                return floor
            return change if floor is None else min(change, floor)

        return cosine

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
        """`Reinforcer.reinforce_later`: counted now, written by the next flush."""
        self.reinforcer.reinforce_later(tenant_id, user_id, ids, useless)

    async def flush(self) -> bool:
        """`Reinforcer.flush`: the pending counts written now."""
        return await self.reinforcer.flush()

    async def drain(self) -> None:
        """Write pending reinforcement now (shutdown, tests)."""
        await self.reinforcer.drain()
