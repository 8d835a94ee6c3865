"""Rebuilding the vector index from SQL (the `reindex` job, `Reindexer.job`).

The memory rows are the truth; the index is a search index over them. A new index schema
(a new collection, `app.stores.vectors.collection_name`) starts empty, and this rebuilds the
point of every live memory, batch by batch along a keyset cursor over (tenant_id, id).
Points have the memories' ids, so an upsert overwrites: a run killed mid-way and run again
from the start rewrites the same points.

What a point is rebuilt from:

- A memory promoted from the log is rebuilt as promotion built it: its session's messages
  around the turn it came from are re-read and chunked by `chunk_turns` with promotion's
  settings, embedded and pointed by the same functions (`embed_chunks`, `chunk_point`). The
  turn it came from is the source whose deterministic id (`memory_id`) is the memory's id:
  for a merged memory (several sources) that is the one it was first promoted from, and
  the others only ever changed its payload. If that turn is gone (its session deleted) the
  first source still in the log gives the context instead.
- A memory with no source left in the log, a caller-written one, or a promoted one whose
  content a caller rewrote (its content is no longer the turn's line) is embedded from its
  own content alone, as `MemoryService.create` and `update` do: dense = turn = that vector,
  sparse from the content, no role.

A deleted memory's turn stays in the log but is no longer context: the memories of the
turns around it are rebuilt without it (`rebuild_followers`, called on delete), and every
rebuild leaves deleted turns out, so its words stop finding its neighbours.

The payload comes from the row (`MemoryPayload.from_row`), so access counts, pins and merged
sources are today's.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.chunking import Chunk, LogMessage, chunk_turns, memory_id
from app.providers.embeddings import Embedder
from app.services.indexing import (
    IndexConfig,
    LineCache,
    chunk_point,
    context_lookahead,
    context_lookback,
    embed_chunks,
    log_message,
)
from app.services.job_kinds import SYSTEM_TENANT, JobContext, JobKind
from app.stores import jobs as job_store
from app.stores import memories as memory_store
from app.stores import messages as message_store
from app.stores import sessions as session_store
from app.stores.db import Database
from app.stores.models import Job, Memory
from app.stores.vectors import MemoryPayload, VectorIndex, VectorPoint

log = logging.getLogger("strata.reindex")

REINDEX = "reindex"


class Reindex(BaseModel):
    """The `reindex` job's payload: the collection it rebuilds (also its key)."""

    collection: str


BATCH = 256


@dataclass(frozen=True, slots=True)
class PointPlan:
    """How one memory's point is rebuilt: its chunk (id and content the memory's own), and
    the role of the turn it came from (None: embedded from its content alone)."""

    row: Memory
    chunk: Chunk
    role: str | None


class Reindexer:
    def __init__(
        self,
        db: Database,
        vectors: VectorIndex,
        embedder: Embedder,
        config: IndexConfig,
        cache: LineCache | None = None,
    ) -> None:
        self.db = db
        self.vectors = vectors
        self.embedder = embedder
        self.config = config
        # Promotion lends its cache of recent lines: a predecessor it rebuilds was embedded
        # a pass ago, with its context.
        self.cache = cache

    # --- the `reindex` job --------------------------------------------------------------
    # A worker enqueues it at start when the index's collection holds no points while SQL
    # holds live memories (a new index schema or embedding model means a new, empty
    # collection; so does a lost Qdrant volume). The job belongs to the system tenant and is
    # keyed by the collection's name, so workers starting together enqueue it once, and a
    # collection is rebuilt once.

    def job(self) -> JobKind[Reindex]:
        return JobKind(REINDEX, Reindex, self._reindex_job)

    async def _reindex_job(self, ctx: JobContext, payload: Reindex) -> dict[str, Any]:
        # Upserts by memory id: a run after a crash starts over and rewrites the same points.
        result = await self.rebuild()
        return {**result, "collection": self.vectors.collection}

    async def enqueue_if_empty(self, *, max_attempts: int) -> Job | None:
        """The collection's reindex job when the index is empty and SQL is not; else None.
        Idempotent by key (the collection name): a second worker gets the same job."""
        if await self.vectors.count() > 0:
            return None
        async with self.db.read() as tx:
            if not await memory_store.any_live(tx):
                return None
        now = datetime.now(UTC)
        collection = self.vectors.collection
        async with self.db.transaction() as tx:
            job, created = await job_store.enqueue(
                tx,
                tenant_id=SYSTEM_TENANT,
                kind=REINDEX,
                key=collection,
                payload=Reindex(collection=collection).model_dump(mode="json"),
                due_at=now,
                max_attempts=max_attempts,
                now=now,
            )
        if created:
            log.info("index %s is empty: reindex job %s enqueued", collection, job.id)
        return job

    async def rebuild(
        self,
        batch: int = BATCH,
        *,
        tenant_id: str | None = None,
        user_id: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Every live memory's point (of one tenant or user, when given); returns
        {"memories": n, "batches": m}. A dry run counts them and writes nothing."""
        after: tuple[str, uuid.UUID] | None = None
        memories = batches = 0
        while True:
            async with self.db.read() as tx:
                rows = await memory_store.live_page(
                    tx, after=after, limit=batch, tenant_id=tenant_id, user_id=user_id
                )
            if not rows:
                break
            memories += len(rows) if dry_run else await self.rebuild_rows(rows)
            batches += 1
            after = (rows[-1].tenant_id, rows[-1].id)
            log.info("reindex: %d memories in %d batches", memories, batches)
        return {"memories": memories, "batches": batches}

    async def rebuild_rows(self, rows: list[Memory]) -> int:
        """Upsert these memories' points, then make sure none of them was deleted or
        rewritten meanwhile: a deleted one's point goes, a changed one is rebuilt again
        (a write after our read has written its own point, but ours may have landed later)."""
        done = 0
        for _ in range(3):
            points = await self.points(rows)
            await self.vectors.upsert(points)
            done += len(points)
            async with self.db.read() as tx:
                found = await _get_many(tx, [(r.tenant_id, r.id) for r in rows])
            now = {m.id: m for m in found}
            gone = [r.id for r in rows if r.id not in now or now[r.id].deleted_at is not None]
            if gone:
                await self.vectors.delete(gone)
            changed = [
                now[r.id]
                for r in rows
                if r.id in now and now[r.id].deleted_at is None and _changed(r, now[r.id])
            ]
            if not changed:
                break
            rows, done = changed, done - len(changed)
        return done

    async def rebuild_followers(self, gone: Memory, *, keep_used: bool = False) -> int:
        """Rebuild the live memories of the turns around a deleted one's turn, whose index
        context carried its words (the turns after it, and the one before it that had it as
        its next turn); returns how many. With `keep_used` (a forget, not a delete),
        neighbours that have been used keep their entry: it proved useful as it is
        (docs/forgetting.md)."""
        lookback = context_lookback(self.config)
        ahead = context_lookahead(self.config)
        if lookback == 0 and ahead == 0:
            return 0
        ids: list[uuid.UUID] = []
        async with self.db.read() as tx:
            for source in gone.sources:
                seq, session_id = source.get("seq"), source.get("session_id")
                if not isinstance(seq, int) or not session_id:
                    continue
                session = await session_store.get(tx, gone.tenant_id, gone.user_id, str(session_id))
                if session is None:
                    continue
                incarnation = session.incarnation
                # The turns after it (it was their context) and before it (it was the
                # next turn of the nearest one).
                near = [*range(1, lookback + 1), *range(-ahead, 0)]
                ids += [
                    memory_id(gone.tenant_id, str(session_id), incarnation, seq + k)
                    for k in near
                    if seq + k > 0
                ]
            rows = [
                r
                for r in await memory_store.get_many(tx, gone.tenant_id, ids, user_id=gone.user_id)
                if r.deleted_at is None and not (keep_used and r.access_count > 0)
            ]
        return await self.rebuild_rows(rows) if rows else 0

    async def points(self, rows: list[Memory]) -> list[VectorPoint]:
        plans = await self._plan(rows)
        chunks, vectors, turns = await embed_chunks(
            self.embedder,
            [p.chunk for p in plans],
            self.config.dense_context_weight,
            self.cache,
            self.config.dense_next_weight,
        )
        by_id = {p.chunk.id: p for p in plans}
        points: list[VectorPoint] = []
        for chunk, vector in zip(chunks, vectors, strict=True):
            plan = by_id[chunk.id]
            points.append(
                chunk_point(
                    plan.row.id,
                    chunk,
                    vector,
                    turns.get(chunk.id),
                    MemoryPayload.from_row(plan.row, role=plan.role),
                    self.config.sparse_context_weight,
                    self.config.sparse_next_weight,
                )
            )
        return points

    async def _plan(self, rows: list[Memory]) -> list[PointPlan]:
        """Each memory's chunk: with its turn's context where its turn is in the log."""
        lookback = context_lookback(self.config)
        ahead = context_lookahead(self.config)
        wanted: dict[SessionKey, set[int]] = defaultdict(set)
        for row in rows:
            for source in row.sources:
                if source.get("session_id") and isinstance(source.get("seq"), int):
                    wanted[_key(row, source)].add(source["seq"])
        logs: dict[SessionKey, dict[int, LogMessage]] = {}
        incarnations: dict[SessionKey, str] = {}
        async with self.db.read() as tx:
            for key, seqs in wanted.items():
                session = await session_store.get(tx, *key)
                if session is None:
                    continue
                incarnations[key] = session.incarnation
                spans = [(max(0, s - lookback - 1), s + ahead) for s in sorted(seqs)]
                found = await message_store.windows(tx, *key, spans)
                logs[key] = {m.seq: log_message(m) for m in found}
            await self._drop_deleted_turns(tx, logs, incarnations, {r.id for r in rows})
        return [self.plan_one(row, logs, incarnations) for row in rows]

    @staticmethod
    async def _drop_deleted_turns(
        tx: AsyncSession,
        logs: dict[SessionKey, dict[int, LogMessage]],
        incarnations: dict[SessionKey, str],
        rebuilding: set[uuid.UUID],
    ) -> None:
        """A turn whose memory was deleted (or forgotten) is no context for its neighbours:
        its words must not keep finding them. The log keeps the message; the index forgets."""
        turn_of: dict[uuid.UUID, tuple[SessionKey, int]] = {}
        for key, messages in logs.items():
            for seq in messages:
                turn_of[memory_id(key[0], key[2], incarnations[key], seq)] = (key, seq)
        ids = [(key[0], i) for i, (key, _) in turn_of.items() if i not in rebuilding]
        for row in await _get_many(tx, ids):
            if row.deleted_at is not None:
                key, seq = turn_of[row.id]
                del logs[key][seq]

    def plan_one(
        self,
        row: Memory,
        logs: dict[SessionKey, dict[int, LogMessage]],
        incarnations: dict[SessionKey, str],
    ) -> PointPlan:
        """A memory's chunk from the log around the turn it came from (`logs`: seq → message
        by (tenant, user, session), deleted turns left out). Promotion plans the turn before its
        slice with it too, from the messages it read."""
        in_log: list[tuple[bool, SessionKey, int]] = []  # (is the turn it came from, …)
        for source in row.sources:
            key = _key(row, source)
            seq = source.get("seq")
            if key in logs and isinstance(seq, int) and seq in logs[key]:
                own = memory_id(key[0], key[2], incarnations[key], seq) == row.id
                in_log.append((own, key, seq))
        in_log.sort(key=lambda s: not s[0])  # the turn it came from first, then sources' order
        for own, key, seq in in_log[:1]:
            messages = logs[key]
            turn = messages[seq]
            if own and turn.line != row.content:
                break  # a caller rewrote it: embedded from its content, as `update` does
            # The window read for this turn (other rows' windows of the session may be in
            # `messages` too): as promotion reads it.
            back, ahead = context_lookback(self.config), context_lookahead(self.config)
            context = [messages[s] for s in range(seq - back, seq) if s in messages]
            following = [messages[s] for s in range(seq + 1, seq + ahead + 1) if s in messages]
            chunks = chunk_turns(
                row.tenant_id,
                incarnations[key],
                context,
                [turn],
                dense_context=self.config.dense_context_turns,
                sparse_context=self.config.sparse_context_turns,
                following=following,
                next_within=ahead,
                back_within=back,
            )
            for chunk in chunks:  # one, unless the turn's role is not an indexed one
                return PointPlan(row, replace(chunk, id=row.id, content=row.content), chunk.role)
        return PointPlan(row, _own_chunk(row), None)


# A session as its memories' sources name it: (tenant, user, session id); the user is the
# memory's own, whose sessions its sources are.
SessionKey = tuple[str, str, str]


def _key(row: Memory, source: dict[str, Any]) -> SessionKey:
    return (row.tenant_id, row.user_id, str(source.get("session_id")))


async def _get_many(tx: AsyncSession, keys: list[tuple[str, uuid.UUID]]) -> list[Memory]:
    """The memories of these (tenant_id, id) keys, one scoped look-up per tenant: a batch
    of a reindex of every tenant spans several."""
    by_tenant: dict[str, list[uuid.UUID]] = defaultdict(list)
    for tenant_id, mid in keys:
        by_tenant[tenant_id].append(mid)
    found: list[Memory] = []
    for tenant_id, ids in by_tenant.items():
        found += await memory_store.get_many(tx, tenant_id, ids)
    return found


def _own_chunk(row: Memory) -> Chunk:
    return Chunk(
        id=row.id,
        content=row.content,
        dense_context=[],
        sparse_context=[],
        sources=row.sources,
        created_at=row.created_at,
        importance=row.importance,
    )


def _changed(before: Memory, after: Memory) -> bool:
    return (
        before.content != after.content
        or before.sources != after.sources
        or before.updated_at != after.updated_at
    )
