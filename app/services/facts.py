"""Fact extraction and reconciliation (docs/facts.md), a promotion step with an LLM.

Promotion enqueues one `extract_facts` job per batch it commits (in the same transaction as
the watermark, so a batch is never promoted without its job). The job reads the batch's
messages, finds the user's current facts similar to them (dense vectors, valid now), and
makes one LLM call for the whole batch: facts with their sources, each with a decision
against the facts shown — add, update (the old fact ends: `valid_to`, `superseded_by`),
delete (the old fact ends, no replacement), none (it is confirmed, its sources grow) —
and relations for the knowledge graph. The plan (`app.core.facts.plan`) keeps only what
the messages support. Nothing is ever destroyed: an ended fact stays a row and a point,
hidden from recall by the valid-time filter unless `as_of` is before its end.

Order of writes, as in promotion: the new facts' points first (deterministic ids, so a
re-run overwrites), then one transaction — rows, ended facts, events, relations — with the
index's `valid_to` of the ended facts set under their row locks before the commit.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from app.core import facts, keys, terms
from app.core.audit import AuditEvent
from app.core.chunking import LogMessage, source_of
from app.core.dedupe import content_hash
from app.providers.embeddings import Embedder
from app.providers.llm import LLM
from app.services.graph import TripleSpec, write_triples
from app.services.job_kinds import JobContext, JobKind
from app.stores import graph as graph_store
from app.stores import jobs as job_store
from app.stores import memories as memory_store
from app.stores import messages as message_store
from app.stores import sessions as session_store
from app.stores.db import Database
from app.stores.vectors import MemoryPayload, PayloadPatch, VectorIndex, VectorPoint, VectorQuery

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from app.stores.models import Memory
    from app.stores.sessions import Claim

log = logging.getLogger("strata.facts")

EXTRACT_FACTS = "extract_facts"


class ExtractFacts(BaseModel):
    """The `extract_facts` job's payload: one promotion batch."""

    # The key's form: 2, its facts' ids are named by tenant and key; a job queued before
    # keys were encoded has none (1), and its facts keep the ids its legacy key names.
    keys: int = 1
    user_id: str
    session_id: str
    incarnation: str
    from_seq: int
    to_seq: int


def job_key(user_id: str, session_id: str, incarnation: str, from_seq: int, to_seq: int) -> str:
    """The batch's job, by the one encoder of keys (app/core/keys.py)."""
    return keys.facts_job_key(user_id, session_id, incarnation, from_seq, to_seq)


def legacy_job_key(session_id: str, incarnation: str, from_seq: int, to_seq: int) -> str:
    """The key of a job queued before keys were encoded (its payload has no "keys"): its
    facts keep the ids that key names, so a re-run writes nothing twice."""
    return f"{session_id}\x1f{incarnation}\x1f{from_seq}-{to_seq}"


async def enqueue_extraction(
    tx: AsyncSession, claim: Claim, from_seq: int, to_seq: int, *, max_attempts: int
) -> None:
    """The batch's extraction job, in the caller's transaction (promotion's commit)."""
    now = datetime.now(UTC)
    await job_store.enqueue(
        tx,
        tenant_id=claim.tenant_id,
        kind=EXTRACT_FACTS,
        key=job_key(claim.user_id, claim.session_id, claim.incarnation, from_seq, to_seq),
        payload=ExtractFacts(
            keys=2,
            user_id=claim.user_id,
            session_id=claim.session_id,
            incarnation=claim.incarnation,
            from_seq=from_seq,
            to_seq=to_seq,
        ).model_dump(mode="json"),
        due_at=now,
        max_attempts=max_attempts,
        now=now,
    )


@dataclass(frozen=True, slots=True)
class _Batch:
    tenant_id: str
    user_id: str
    session_id: str
    key: str  # names its facts' ids (`facts.fact_id`): the tenant and the job's key
    messages: list[facts.BatchMessage]


@dataclass(frozen=True, slots=True)
class FactConfig:
    """The settings fact extraction reads (app/settings.py; built in app/wiring.py)."""

    fact_candidates: int  # existing facts shown to the model per batch, at most
    fact_similarity: float  # the least similarity of a fact shown


class FactExtractor:
    def __init__(
        self,
        db: Database,
        vectors: VectorIndex,
        embedder: Embedder,
        llm: LLM,
        config: FactConfig,
    ) -> None:
        self.db = db
        self.vectors = vectors
        self.embedder = embedder
        self.llm = llm
        self.config = config

    def job(self) -> JobKind[ExtractFacts]:
        """`extract_facts`: one promotion batch's extraction. Idempotent: new facts have
        ids derived from the batch and their text, and a fact already ended is not ended
        again."""
        return JobKind(EXTRACT_FACTS, ExtractFacts, self._extract_job)

    async def _extract_job(self, ctx: JobContext, payload: ExtractFacts) -> dict[str, Any]:
        return await self.extract(ctx.tenant_id, payload)

    async def extract(self, tenant_id: str, payload: ExtractFacts) -> dict[str, Any]:
        """One batch: read, find similar facts, one LLM call, plan, write. Idempotent."""
        batch = await self._batch(tenant_id, payload)
        if batch is None:
            return {"skipped": "the session is gone or the batch has no user message"}
        known = await self._similar(batch)
        answer = await self.llm.complete_json(
            facts.prompt(batch.messages, known), facts.Extraction, purpose="facts"
        )
        plan = facts.plan(answer.value, batch.messages, known)
        for why in plan.dropped:
            log.info("extraction dropped %s", why)
        counts = await self._apply(batch, plan, {f.id: f for f in known})
        return {
            "decisions": counts,
            "dropped": len(plan.dropped),
            "known": len(known),
            "llm_usage": answer.usage.as_dict(),
        }

    async def _batch(self, tenant_id: str, payload: ExtractFacts) -> _Batch | None:
        session_id, user_id = payload.session_id, payload.user_id
        from_seq, to_seq = payload.from_seq, payload.to_seq
        async with self.db.read() as tx:
            session = await session_store.get(tx, tenant_id, user_id, session_id)
            if session is None or session.incarnation != payload.incarnation:
                return None
            rows = await message_store.seq_range(
                tx, tenant_id, user_id, session_id, after_seq=from_seq, upto_seq=to_seq
            )
        messages = [
            facts.BatchMessage(
                m.seq,
                m.role,
                m.content,
                m.created_at,
                source_of(
                    LogMessage(
                        m.session_id, m.seq, m.client_id, m.role, m.content, m.created_at, {}
                    )
                ),
            )
            for m in rows
            if m.role in ("user", "assistant") and m.content.strip()
        ]
        if not any(m.role == "user" for m in messages):
            return None
        incarnation = payload.incarnation
        if payload.keys == 2:
            name = keys.join(
                tenant_id, job_key(session.user_id, session_id, incarnation, from_seq, to_seq)
            )
        else:
            name = legacy_job_key(session_id, incarnation, from_seq, to_seq)
        return _Batch(tenant_id, session.user_id, session_id, name, messages)

    async def _similar(self, batch: _Batch) -> list[facts.KnownFact]:
        """The user's current facts nearest to the batch's user messages (dense cosine at
        least `fact_similarity`), best first, at most `fact_candidates`."""
        texts = [m.content for m in batch.messages if m.role == "user"]
        vectors = await self.embedder.embed(texts, bulk=True)
        now = datetime.now(UTC).timestamp()
        best: dict[uuid.UUID, float] = {}
        for vector in vectors:
            lists = await self.vectors.candidates(
                VectorQuery(
                    tenant_id=batch.tenant_id,
                    user_id=batch.user_id,
                    dense=vector,
                    sparse=terms.SparseVec([], []),
                    limit=self.config.fact_candidates,
                    memory_types=list(facts.FACT_TYPES),
                    kinds=["memory"],
                    with_cosines=False,  # the dense list's own scores are what it reads
                    valid_at=now,
                )
            )
            for hit in lists.dense:
                if hit.score >= self.config.fact_similarity:
                    best[hit.id] = max(best.get(hit.id, 0.0), hit.score)
        ranked = sorted(best, key=lambda i: best[i], reverse=True)[: self.config.fact_candidates]
        async with self.db.read() as tx:
            found = await memory_store.get_many(tx, batch.tenant_id, ranked, user_id=batch.user_id)
            rows = {m.id: m for m in found}
        return [
            facts.KnownFact(r.id, r.content, r.memory_type, r.valid_from)
            for i in ranked
            if (r := rows.get(i)) is not None and r.deleted_at is None and r.valid_to is None
        ]

    async def _apply(
        self, batch: _Batch, plan: facts.Plan, known: dict[uuid.UUID, facts.KnownFact]
    ) -> dict[str, int]:
        new = [d for d in plan.decisions if d.action in ("add", "update")]
        dense = await self.embedder.embed([d.content for d in new], bulk=True) if new else []
        ids = {d.index: facts.fact_id(batch.key, d.content) for d in new}
        points = [
            VectorPoint(
                ids[d.index],
                vector,
                terms.document_vector(d.content),
                MemoryPayload(
                    tenant_id=batch.tenant_id,
                    user_id=batch.user_id,
                    session_id=batch.session_id,
                    memory_type=d.memory_type,
                    content=d.content,
                    importance=d.importance,
                    sources=d.sources,
                    metadata={},
                    created_at=d.at,
                ),
            )
            for d, vector in zip(new, dense, strict=True)
        ]
        await self.vectors.upsert(points)
        async with self.db.transaction() as tx:
            return await self._commit(tx, batch, plan, ids)

    async def _commit(
        self, tx: AsyncSession, batch: _Batch, plan: facts.Plan, ids: dict[int, uuid.UUID]
    ) -> dict[str, int]:
        now = datetime.now(UTC)
        t, u = batch.tenant_id, batch.user_id
        await session_store.ensure_user(tx, t, u, now)
        targets = await memory_store.lock_facts(
            tx, t, u, [d.target for d in plan.decisions if d.target is not None]
        )
        rows: list[memory_store.MemoryValues] = []
        events: list[AuditEvent] = []
        patches: list[tuple[uuid.UUID, PayloadPatch]] = []
        ended: list[uuid.UUID] = []
        counts = {"add": 0, "update": 0, "delete": 0, "none": 0}
        holder: dict[int, uuid.UUID] = {}  # decision index -> the fact its triples restate
        for d in plan.decisions:
            old = targets.get(d.target) if d.target is not None else None
            if d.target is not None and (old is None or old.valid_to is not None):
                # Ended or gone since the call (a re-run, a concurrent batch): an update
                # still adds its fact; a delete or a confirmation has nothing left to do.
                if d.action != "update":
                    continue
                old = None
            if d.action in ("add", "update"):
                new_id = ids[d.index]
                holder[d.index] = new_id
                rows.append(_row(batch, d, new_id, now))
                events.append(_created(batch, d, new_id, old, now))
            if old is None:
                counts["add"] += 1
                continue
            counts[d.action] += 1
            if d.action in ("update", "delete"):
                valid_to = facts.ended_at(old.valid_from, d.at)
                successor = ids[d.index] if d.action == "update" else None
                await memory_store.end_validity(
                    tx, t, old.id, valid_to=valid_to, superseded_by=successor, now=now
                )
                ended.append(old.id)
                patches.append((old.id, PayloadPatch(valid_to=valid_to)))
                events.append(_ended(batch, d, old, valid_to, successor, now))
            else:  # none: the fact is confirmed by these messages
                holder[d.index] = old.id
                sources = _merge_sources(old.sources, d.sources)
                if sources != old.sources:
                    await memory_store.update_fields(
                        tx, t, u, old.id, {"sources": sources, "updated_at": now}
                    )
                    patches.append((old.id, PayloadPatch(sources=sources)))
                events.append(
                    AuditEvent(
                        t,
                        u,
                        old.id,
                        "confirmed",
                        old={"sources": old.sources},
                        new={"sources": sources},
                        reason=d.reason,
                        at=now,
                    )
                )
        inserted = await memory_store.insert_many(tx, rows)
        # A re-run inserts nothing again, so it must not log "created" again either.
        events = [e for e in events if e.event != "created" or e.memory_id in inserted]
        await memory_store.add_events(tx, events)
        if ended:
            await graph_store.end_of_memories(tx, t, ended, max(d.at for d in plan.decisions))
        triples = _triple_specs(plan, holder)
        if triples:
            await write_triples(tx, t, u, triples, now)
        # Under the row locks, before the commit: if the index fails, nothing moves.
        await self.vectors.set_payload(patches, owner=(t, u))
        counts["triples"] = len(triples)
        return counts


def _created(
    batch: _Batch, d: facts.Decision, new_id: uuid.UUID, old: Memory | None, now: datetime
) -> AuditEvent:
    return AuditEvent(
        batch.tenant_id,
        batch.user_id,
        new_id,
        "created",
        old=None,
        new={
            "content": d.content,
            "sources": d.sources,
            "supersedes": str(old.id) if old is not None else None,
        },
        reason=f"extracted ({d.action}): {d.reason}",
        at=now,
    )


def _ended(
    batch: _Batch,
    d: facts.Decision,
    old: Memory,
    valid_to: datetime,
    successor: uuid.UUID | None,
    now: datetime,
) -> AuditEvent:
    return AuditEvent(
        batch.tenant_id,
        batch.user_id,
        old.id,
        "superseded" if d.action == "update" else "deleted",
        old={"content": old.content, "valid_to": None},
        new={
            "valid_to": valid_to.isoformat(),
            "superseded_by": str(successor) if successor else None,
            "statement": d.content or None,
        },
        reason=d.reason,
        at=now,
    )


def _triple_specs(plan: facts.Plan, holder: dict[int, uuid.UUID]) -> list[TripleSpec]:
    """The plan's triples, each tied to the fact it restates (`holder`: decision -> fact)."""
    return [
        TripleSpec(
            x.subject,
            x.predicate,
            x.object,
            x.subject_type,
            x.object_type,
            valid_from=x.at,
            sources=x.sources,
            memory_id=holder.get(x.fact) if x.fact is not None else None,
        )
        for x in plan.triples
    ]


def _row(
    batch: _Batch, d: facts.Decision, fact_id: uuid.UUID, now: datetime
) -> memory_store.MemoryValues:
    return {
        "id": fact_id,
        "tenant_id": batch.tenant_id,
        "user_id": batch.user_id,
        "session_id": batch.session_id,
        "memory_type": d.memory_type,
        "content": d.content,
        "importance": d.importance,
        "access_count": 0,
        "last_accessed_at": None,
        "strength": 1.0,
        "pinned": False,
        "valid_from": d.at,
        "sources": d.sources,
        "metadata_": {},
        "content_hash": content_hash(d.content),
        "created_at": d.at,
        "updated_at": now,
    }


def _merge_sources(
    old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    seen = {(s.get("session_id"), s.get("seq")) for s in old}
    out = list(old)
    for s in new:
        if (s.get("session_id"), s.get("seq")) not in seen:
            seen.add((s.get("session_id"), s.get("seq")))
            out.append(s)
    return out
