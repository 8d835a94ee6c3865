"""Promotion (L2 → L3): new log messages become indexed episodic memories.

The log and its watermarks are the queue. A pass leases sessions whose `last_seq` is ahead
of `indexed_seq` (one per user, the least recently served first) and takes one bounded
slice of each (at most `worker_batch_messages` messages and `worker_slice_chars`
characters), so a huge import is worked off in turns with everyone else's messages and
memory stays bounded. It chunks the new messages, embeds them in batches off the event loop,
writes the points (deterministic ids, so a replay overwrites rather than duplicates), then
commits the memory rows, their audit events and the advanced watermark in one
transaction, guarded by the lease. A near-duplicate of a memory the user already has is
merged into it (its sources grow) instead of being stored twice. After each commit the
requests waiting for the session are woken (`Signals`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from app.core import terms
from app.core.audit import AuditEvent
from app.core.backoff import backoff_seconds
from app.core.chunking import Chunk, LogMessage, chunk_turns, embedding_windows
from app.core.clock import Clock, utc_now
from app.core.dedupe import (
    ExistingMemory,
    Gain,
    NewMemory,
    Plan,
    apply_gain,
    content_hash,
    plan_batch,
)
from app.errors import EmbeddingRejected
from app.providers.embeddings import Embedder
from app.services.facts import enqueue_extraction
from app.settings import Settings
from app.stores import memories as memory_store
from app.stores import messages as message_store
from app.stores import sessions as session_store
from app.stores.db import Database
from app.stores.models import Message
from app.stores.sessions import Claim
from app.stores.signals import Signals
from app.stores.vectors import MemoryPayload, PayloadPatch, VectorIndex, VectorPoint

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

log = logging.getLogger("strata.promotion")


@dataclass(frozen=True, slots=True)
class _Slice:
    """What one pass promotes of one session."""

    chunks: list[Chunk]
    cursor: int  # the watermark it starts from
    upto: int  # the watermark it ends at
    count: int  # new messages in it
    extract: bool  # queue fact extraction with it


class Promoter:
    def __init__(
        self,
        db: Database,
        vectors: VectorIndex,
        embedder: Embedder,
        settings: Settings,
        *,
        owner: str,
        stop: asyncio.Event | None = None,
        signals: Signals | None = None,
        extract_facts: bool = False,
        clock: Clock = utc_now,
    ) -> None:
        self.db = db
        self.vectors = vectors
        self.embedder = embedder
        self.settings = settings
        self.owner = owner
        self.stop = stop or asyncio.Event()
        self.signals = signals
        # The vectors of the lines embedded lately: a slice's context turns were the last
        # slice's new ones, and a long turn costs tenths of a second to embed again.
        self.recent_lines = LineCache(512)
        # Whether the last pass left messages behind (a slice's bound, or more sessions than
        # one pass claims): the worker then goes on at once, never pausing to gather.
        self.left_backlog = False
        # With an LLM: each committed batch with a user message queues its fact
        # extraction (app/services/facts.py), in the batch's own transaction.
        self.extract_facts = extract_facts
        # "Now" for what the memories record (their writes start their forgetting clock,
        # docs/forgetting.md); leases run on the real clock.
        self.clock = clock

    def _lease_until(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.settings.worker_lease_seconds)

    async def run_once(self, max_sessions: int = 8) -> int:
        """One pass over the backlog; returns how many messages were promoted."""
        async with self.db.transaction() as tx:
            backlog = await session_store.claim_backlog(
                tx,
                owner=self.owner,
                now=datetime.now(UTC),
                lease_until=self._lease_until(),
                limit=max_sessions,
            )
        done, cut = await self.promote_all(backlog.claims)
        # Set after the pass's last await: a pass run meanwhile (the maintenance job's)
        # cannot overwrite it before the worker loop reads it.
        self.left_backlog = backlog.more or cut
        return done

    async def promote_all(self, claims: list[Claim]) -> tuple[int, bool]:
        """Promote one slice of each claimed session: read every slice, embed the lines of
        all of them in one call (one session's slice is often a handful of turns, and a
        model call costs about the same for five lines as for fifty), then write each
        session in turn. A failing session backs off alone; the others go on. Every claim's
        lease is given back, also when the pass is cancelled (a worker stopping).

        Claims are told apart by their place in `claims`: two tenants may both have a
        session called "chat" in one pass. Returns the messages promoted, and whether a
        slice's bound left some of a session's behind."""
        slices: dict[int, _Slice] = {}
        retry: dict[int, datetime] = {}
        released: set[int] = set()

        def failed(n: int) -> None:
            log.exception("promotion of session %s failed", claims[n].session_id)
            retry[n] = self._retry_at(claims[n].promote_failures + 1)
            slices.pop(n, None)

        done, cut = 0, False
        try:
            for n, claim in enumerate(claims):
                try:
                    piece = await self._slice(claim)
                except Exception:
                    failed(n)
                    continue
                if piece is not None:
                    slices[n] = piece
                    cut = cut or piece.upto < claim.last_seq  # a slice's bound left some
            embedded: dict[uuid.UUID, tuple[list[float], list[float] | None]] = {}
            try:
                embedded = await self._embed_all([c for p in slices.values() for c in p.chunks])
            except Exception:
                # Perhaps one session's text is what fails (a provider refusing it, a bad
                # row): each on its own, so only that one backs off.
                for n, piece in list(slices.items()):
                    try:
                        embedded.update(await self._embed_all(piece.chunks))
                    except Exception:
                        failed(n)
            for n, claim in enumerate(claims):
                piece = slices.get(n)
                try:
                    if piece is not None and not self.stop.is_set():
                        count = await self._promote_slice(claim, piece, embedded)
                        if count is not None:  # committed, and the lease given back with it
                            released.add(n)
                            done += count
                except Exception:
                    # One failing session (a provider down, a bad row) must not hold up
                    # the others; it backs off on its own and a later pass retries it.
                    failed(n)
                finally:
                    if n not in released:
                        released.add(n)
                        await self._release(claim, retry.get(n))
        finally:
            for n, claim in enumerate(claims):
                if n not in released:
                    with contextlib.suppress(Exception):
                        await self._release(claim, retry.get(n))
        return done, cut

    async def _release(self, claim: Claim, retry_at: datetime | None) -> None:
        async with self.db.transaction() as tx:
            await session_store.release_lease(
                tx,
                tenant_id=claim.tenant_id,
                session_id=claim.session_id,
                owner=self.owner,
                retry_at=retry_at,
            )

    def _retry_at(self, failures: int) -> datetime:
        wait = backoff_seconds(
            failures,
            base=self.settings.promote_retry_base_seconds,
            cap=self.settings.promote_retry_max_seconds,
        )
        return datetime.now(UTC) + timedelta(seconds=wait)

    async def promote(self, claim: Claim) -> int:
        """One slice of the session's backlog; returns how many messages it indexed."""
        piece = await self._slice(claim)
        if piece is None:
            return 0
        done = await self._promote_slice(claim, piece, await self._embed_all(piece.chunks))
        return done or 0

    async def _slice(self, claim: Claim) -> _Slice | None:
        """The session's next slice, chunked (None: nothing to do)."""
        cursor = claim.indexed_seq
        if cursor >= claim.last_seq or self.stop.is_set():
            return None
        upto = min(claim.last_seq, cursor + self.settings.worker_batch_messages)
        lookback = context_lookback(self.settings)
        async with self.db.read() as tx:
            rows = await message_store.seq_range(
                tx,
                claim.tenant_id,
                claim.session_id,
                after_seq=max(0, cursor - lookback),
                upto_seq=upto,
            )
        log_messages = [log_message(r) for r in rows]
        context = [m for m in log_messages if m.seq <= cursor]
        pending = [m for m in log_messages if m.seq > cursor]
        new = slice_by_chars(pending, self.settings.worker_slice_chars)
        # The whole range when it all fits (stepping over any gap in the log), else up to
        # the last message of the slice.
        new_upto = upto if len(new) == len(pending) else new[-1].seq
        chunks = chunk_turns(
            claim.tenant_id,
            claim.incarnation,
            context,
            new,
            dense_context=self.settings.dense_context_turns,
            sparse_context=self.settings.sparse_context_turns,
        )
        extract = self.extract_facts and any(m.role == "user" for m in new)
        return _Slice(chunks, cursor, new_upto, len(new), extract)

    async def _promote_slice(
        self,
        claim: Claim,
        piece: _Slice,
        embedded: dict[uuid.UUID, tuple[list[float], list[float] | None]],
    ) -> int | None:
        """The messages indexed, the lease given back with them; None when the lease was
        lost and nothing was written (the caller still holds nothing to give back)."""
        # A chunk the provider refused stays unindexed (`embed_chunks`).
        kept = [c for c in piece.chunks if c.id in embedded]
        vectors = [embedded[c.id][0] for c in kept]
        turns = {c.id: t for c in kept if (t := embedded[c.id][1]) is not None}
        written = await self._write(
            claim, kept, vectors, turns, piece.cursor, piece.upto, extract=piece.extract
        )
        if not written:
            log.info("lease on %s lost; another worker goes on", claim.session_id)
            return None
        if self.signals is not None:
            await self.signals.indexed(claim.tenant_id, claim.session_id, piece.upto)
        return piece.count

    async def _embed_all(
        self, chunks: list[Chunk]
    ) -> dict[uuid.UUID, tuple[list[float], list[float] | None]]:
        """Each chunk's indexed vector and its turn's own vector, by chunk id."""
        kept, vectors, turns = await embed_chunks(
            self.embedder, chunks, self.settings.dense_context_weight, self.recent_lines
        )
        return {c.id: (v, turns.get(c.id)) for c, v in zip(kept, vectors, strict=True)}

    async def _write(
        self,
        claim: Claim,
        chunks: list[Chunk],
        vectors: list[list[float]],
        turns: dict[uuid.UUID, list[float]],
        from_seq: int,
        to_seq: int,
        *,
        extract: bool,
    ) -> bool:
        """Read what exists, plan (pure), then write: the points, then one transaction.

        False when the batch was rolled back because the lease was lost or a merge target
        vanished; the next pass redoes it.
        """
        done, same_text = await self._existing(claim, chunks)
        plan = plan_batch(chunks, vectors, done, same_text, self.settings.dedupe_threshold)
        # Term vectors of long texts take tens of milliseconds each: off the event loop,
        # which the api shares with an in-process worker.
        points = await asyncio.to_thread(
            lambda: [self._point(claim, m, turns.get(m.chunk.id)) for m in plan.fresh]
        )
        # Index first (idempotent: deterministic ids), then the canonical rows and the
        # watermark atomically, under the lease.
        await self.vectors.upsert(points)
        try:
            async with self.db.transaction() as tx:
                await self._commit(tx, claim, plan, from_seq, to_seq)
                if extract:
                    await enqueue_extraction(
                        tx, claim, from_seq, to_seq, max_attempts=self.settings.job_max_attempts
                    )
        except (_Stale, _LeaseLost):
            # Perhaps the session was deleted meanwhile: then its fresh points must go too.
            await self._forget_points_of_gone_session(claim, [p.id for p in points])
            return False
        except BaseException:
            with contextlib.suppress(Exception):
                await self._forget_points_of_gone_session(claim, [p.id for p in points])
            raise
        return True

    async def _existing(
        self, claim: Claim, chunks: list[Chunk]
    ) -> tuple[set[uuid.UUID], dict[str, ExistingMemory]]:
        """What the batch meets in storage: the ids already stored (a replay), and for each
        text of the batch the user's memory with that text and its indexed vector."""
        if not chunks:
            return set(), {}
        hashes = sorted({content_hash(c.content) for c in chunks})
        async with self.db.read() as tx:
            ids = [c.id for c in chunks]
            done = await memory_store.ids_among(tx, claim.tenant_id, claim.user_id, ids)
            same_text = await memory_store.ids_by_hashes(tx, claim.tenant_id, claim.user_id, hashes)
        stored = await self.vectors.dense_vectors(list(same_text.values()))
        return done, {h: ExistingMemory(mid, stored.get(mid)) for h, mid in same_text.items()}

    async def _commit(
        self, tx: AsyncSession, claim: Claim, plan: Plan, from_seq: int, to_seq: int
    ) -> None:
        """The batch's rows, its merges, their events and the watermark: one transaction,
        valid only while we hold the lease."""
        now = self.clock()
        if not await session_store.advance_watermark(
            tx,
            tenant_id=claim.tenant_id,
            session_id=claim.session_id,
            owner=self.owner,
            from_seq=from_seq,
            to_seq=to_seq,
            lease_until=self._lease_until(),
            release=True,
        ):
            raise _LeaseLost
        inserted = await memory_store.insert_many(
            tx, [self._row(claim, memory, now) for memory in plan.fresh]
        )
        # A replayed batch re-inserts nothing, so it must not re-log "created" either.
        created = [
            self._created(claim, memory, now)
            for memory in plan.fresh
            if memory.chunk.id in inserted
        ]
        merged, patches = await self._merge(tx, claim, plan.merges, now)
        await memory_store.add_events(tx, [*created, *merged])
        # Under the row locks, before the commit: if the index fails, nothing moves.
        await self.vectors.set_payload(patches)

    async def _merge(
        self, tx: AsyncSession, claim: Claim, gains: dict[uuid.UUID, Gain], now: datetime
    ) -> tuple[list[AuditEvent], list[tuple[uuid.UUID, PayloadPatch]]]:
        """Apply each gain to its memory as it is now, under a row lock, not as read before
        the plan; returns the events and the index updates of the memories that changed."""
        live = await memory_store.lock_live(tx, claim.tenant_id, claim.user_id, list(gains))
        if len(live) != len(gains):
            raise _Stale  # a merge target was deleted meanwhile: redo the batch
        events: list[AuditEvent] = []
        patches: list[tuple[uuid.UUID, PayloadPatch]] = []
        for target in live:
            gain = gains[target.id]
            merged = apply_gain(target.sources, target.created_at, gain)
            if merged is None:
                continue
            await memory_store.save_merge(
                tx,
                claim.tenant_id,
                claim.user_id,
                target.id,
                sources=merged.sources,
                created_at=merged.created_at,
                now=now,
            )
            patches.append(
                (target.id, PayloadPatch(sources=merged.sources, created_at=merged.created_at))
            )
            events.append(
                AuditEvent(
                    claim.tenant_id,
                    claim.user_id,
                    target.id,
                    "updated",
                    old={"sources": target.sources, "created_at": target.created_at.isoformat()},
                    new={"sources": merged.sources, "created_at": merged.created_at.isoformat()},
                    reason="near-duplicate merged: " + gain.reason,
                    at=now,
                )
            )
        return events, patches

    def _point(self, claim: Claim, memory: NewMemory, turn: list[float] | None) -> VectorPoint:
        chunk = memory.chunk
        payload = MemoryPayload(
            tenant_id=claim.tenant_id,
            user_id=claim.user_id,
            session_id=claim.session_id,
            memory_type="episodic",
            content=chunk.content,
            importance=chunk.importance,
            sources=memory.sources,
            metadata={},
            created_at=memory.created_at,
            role=chunk.role,
        )
        return chunk_point(
            chunk.id, chunk, memory.vector, turn, payload, self.settings.sparse_context_weight
        )

    @staticmethod
    def _row(claim: Claim, memory: NewMemory, now: datetime) -> memory_store.MemoryValues:
        chunk = memory.chunk
        return {
            "id": chunk.id,
            "tenant_id": claim.tenant_id,
            "user_id": claim.user_id,
            "session_id": claim.session_id,
            "memory_type": "episodic",
            "content": chunk.content,
            "importance": chunk.importance,
            "access_count": 0,
            "last_accessed_at": None,
            "strength": 1.0,
            "pinned": False,
            "valid_from": memory.created_at,
            "sources": memory.sources,
            "metadata_": {},
            "content_hash": content_hash(chunk.content),
            "created_at": memory.created_at,
            "updated_at": now,
        }

    @staticmethod
    def _created(claim: Claim, memory: NewMemory, now: datetime) -> AuditEvent:
        return AuditEvent(
            claim.tenant_id,
            claim.user_id,
            memory.chunk.id,
            "created",
            old=None,
            new={"content": memory.chunk.content, "sources": memory.sources},
            reason="promoted from the session log",
            at=now,
        )

    async def _forget_points_of_gone_session(self, claim: Claim, ids: list[uuid.UUID]) -> None:
        """A session deleted while its batch was promoted: the points just written must go
        too, or recall would keep returning what the caller erased. (When another worker
        took the lease instead, it writes these same ids, so they stay.)"""
        async with self.db.read() as tx:
            session = await session_store.get(tx, claim.tenant_id, claim.session_id)
        if session is None or session.created_at.isoformat() != claim.incarnation:
            await self.vectors.delete(ids)


def slice_by_chars(messages: list[LogMessage], max_chars: int) -> list[LogMessage]:
    """The first messages whose contents add up to at most `max_chars` (at least one), so a
    slice of 32,000-character messages is two of them, not 256."""
    total = 0
    for i, m in enumerate(messages):
        total += len(m.content)
        if total > max_chars and i > 0:
            return messages[:i]
    return messages


def context_lookback(settings: Settings) -> int:
    """How many messages before a turn to read for its context: system messages are skipped
    by the chunker, so a little more than the context turns."""
    turns = max(settings.dense_context_turns, settings.sparse_context_turns)
    return turns * 3 + 2 if turns else 0


def log_message(row: Message) -> LogMessage:
    return LogMessage(
        row.session_id, row.seq, row.client_id, row.role, row.content, row.created_at, row.metadata_
    )


class LineCache:
    """The vectors of the last `size` lines embedded, by a digest of their text."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._vectors: OrderedDict[bytes, np.ndarray[Any, Any]] = OrderedDict()

    @staticmethod
    def _key(line: str) -> bytes:
        return hashlib.blake2b(line.encode(), digest_size=16).digest()

    def get(self, line: str) -> np.ndarray[Any, Any] | None:
        key = self._key(line)
        vector = self._vectors.get(key)
        if vector is not None:
            self._vectors.move_to_end(key)
        return vector

    def put(self, line: str, vector: np.ndarray[Any, Any]) -> None:
        self._vectors[self._key(line)] = vector
        self._vectors.move_to_end(self._key(line))
        while len(self._vectors) > self.size:
            self._vectors.popitem(last=False)


async def embed_chunks(
    embedder: Embedder,
    chunks: list[Chunk],
    context_weight: float,
    cache: LineCache | None = None,
) -> tuple[list[Chunk], list[list[float]], dict[uuid.UUID, list[float]]]:
    """One embedding per distinct line; a chunk's vector blends in its context's.

    Returns the chunks that could be embedded, their (blended) vectors, and each one's
    own line's vector (the point's `turn` vector): a line the provider refuses is
    skipped (it stays in the log), so one message cannot stall a session.
    """
    if not chunks:
        return [], [], {}
    lines = list(dict.fromkeys(line for c in chunks for line in (*c.dense_context, c.content)))
    by_line: dict[str, np.ndarray[Any, Any]] = {}
    if cache is not None:
        for line in lines:
            if (known := cache.get(line)) is not None:
                by_line[line] = known
        lines = [line for line in lines if line not in by_line]
    try:
        fresh = await _embed_lines(embedder, lines) if lines else {}
    except EmbeddingRejected:
        fresh = {}
        for line in lines:
            try:
                fresh.update(await _embed_lines(embedder, [line]))
            except EmbeddingRejected:
                log.warning("embedding provider refused a message; it stays unindexed")
    by_line.update(fresh)
    if cache is not None:
        for line, vector in fresh.items():
            cache.put(line, vector)
    w = context_weight
    kept: list[Chunk] = []
    out: list[list[float]] = []
    turns: dict[uuid.UUID, list[float]] = {}
    for c in chunks:
        if c.content not in by_line:
            continue
        v = by_line[c.content]
        turns[c.id] = v.tolist()
        context_vectors = [by_line[line] for line in c.dense_context if line in by_line]
        if context_vectors and w > 0:
            v = (1 - w) * v + w * np.mean(np.stack(context_vectors), axis=0)
        norm = float(np.linalg.norm(v))
        kept.append(c)
        out.append((v / norm if norm else v).tolist())
    return kept, out, turns


async def _embed_lines(embedder: Embedder, lines: list[str]) -> dict[str, np.ndarray[Any, Any]]:
    """Each line's vector, a long line's as the mean of its windows' (`embedding_windows`)."""
    windows = [embedding_windows(line) for line in lines]
    flat = [w for ws in windows for w in ws]
    vectors = iter(await embedder.embed(flat, bulk=True))
    by_line: dict[str, np.ndarray[Any, Any]] = {}
    for line, ws in zip(lines, windows, strict=True):
        if len(ws) == 1:
            by_line[line] = np.asarray(next(vectors), dtype=np.float32)
            continue
        mean = np.mean([np.asarray(next(vectors), dtype=np.float32) for _ in ws], axis=0)
        norm = float(np.linalg.norm(mean))
        by_line[line] = mean / norm if norm else mean
    return by_line


def chunk_point(
    point_id: uuid.UUID,
    chunk: Chunk,
    vector: list[float],
    turn: list[float] | None,
    payload: MemoryPayload,
    sparse_context_weight: float,
) -> VectorPoint:
    """A chunk's point: its embedded vectors, its terms with their context's at
    `sparse_context_weight`, and `payload`. Promotion and the reindex job both build points
    here, so a rebuilt index is the one promotion wrote."""
    sparse = terms.document_vector(chunk.content, chunk.sparse_context, sparse_context_weight)
    return VectorPoint(point_id, vector, sparse, payload, turn)


class _Stale(Exception):
    """Rolls back a batch whose merge target changed under it; the next pass redoes it."""


class _LeaseLost(Exception):
    """Rolls back a batch whose session another worker has taken over."""
