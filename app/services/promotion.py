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
import functools
import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from app.core.audit import AuditEvent
from app.core.backoff import backoff_seconds
from app.core.chunking import INDEXED_ROLES, Chunk, LogMessage, chunk_turns, memory_id
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
from app.providers.embeddings import Embedder
from app.services.facts import enqueue_extraction
from app.services.graph_extraction import GraphExtraction, Said
from app.services.indexing import (
    IndexConfig,
    LineCache,
    chunk_point,
    context_lookahead,
    context_lookback,
    embed_chunks,
    log_message,
    warm_lines,
)
from app.services.reindex import PointPlan, Reindexer
from app.services.search import text_facts
from app.stores import memories as memory_store
from app.stores import messages as message_store
from app.stores import sessions as session_store
from app.stores.db import Database
from app.stores.models import Memory
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
    # The point of the turn just before the slice, promoted without its next turn (the
    # slice's first), rebuilt with it and written with the slice (`Chunk.after`).
    before: PointPlan | None = None
    # The memories of the promoted turns read for context, live when read: one deleted
    # before the commit has the points that carried its words rebuilt after it.
    watch: list[uuid.UUID] = field(default_factory=list)
    # Without an LLM: what the new user turns state, written with the slice.
    said: list[Said] = field(default_factory=list)

    @property
    def to_embed(self) -> list[Chunk]:
        return [*self.chunks, self.before.chunk] if self.before is not None else self.chunks


@dataclass(frozen=True, slots=True)
class PromotionConfig:
    """The settings promotion reads (app/settings.py; built in app/wiring.py)."""

    index: IndexConfig  # how a turn's point is built (the reindexer's too)
    worker_batch_messages: int
    worker_slice_chars: int
    worker_lease_seconds: float
    promote_retry_base_seconds: float
    promote_retry_max_seconds: float
    dedupe_threshold: float
    job_max_attempts: int
    # With an LLM: each committed batch with a user message queues its fact extraction
    # (app/services/facts.py), in the batch's own transaction.
    extract_facts: bool = False
    # In the api's process (the embedded mode), recall scores in this same process: the
    # promoted turns' text facts are worked out here, off the event loop, so the first
    # recalls that meet them find them ready (~60 us a turn otherwise, on the request:
    # bench/README.md, "A conversation's new turns, ready for its next recall").
    warm_scoring: bool = False


@dataclass(frozen=True, slots=True)
class PromoterParts:
    """What a promoter works with: the stores, the encoder, and the optional collaborators."""

    db: Database
    vectors: VectorIndex
    embedder: Embedder
    signals: Signals | None = None
    # Without an LLM: the promoted user turns' entities, relations and profile facts by
    # patterns (app/services/graph_extraction.py), in the batch's own transaction.
    graph: GraphExtraction | None = None
    # "Now" for what the memories record (their writes start their forgetting clock,
    # docs/forgetting.md); leases run on the real clock.
    clock: Clock = utc_now


class Promoter:
    def __init__(
        self,
        parts: PromoterParts,
        config: PromotionConfig,
        *,
        owner: str,
        stop: asyncio.Event | None = None,
    ) -> None:
        db, vectors, embedder = parts.db, parts.vectors, parts.embedder
        self.db = db
        self.warm_scoring = config.warm_scoring
        self.vectors = vectors
        self.embedder = embedder
        self.config = config
        self.owner = owner
        self.stop = stop or asyncio.Event()
        self.signals = parts.signals
        # The vectors of the lines embedded lately: a slice's context turns were the last
        # slice's new ones, and a long turn costs tenths of a second to embed again. It
        # also holds the next slices embedded ahead (`_look_ahead`), at most half of it.
        self.recent_lines = LineCache(1024)
        self.reindexer = Reindexer(db, vectors, embedder, config.index, self.recent_lines)
        # Whether the last pass left messages behind (a slice's bound, or more sessions than
        # one pass claims): the worker then goes on at once, never pausing to gather.
        self.left_backlog = False
        self.extract_facts = config.extract_facts
        self.graph = parts.graph
        self.clock = parts.clock

    def _lease_until(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.config.worker_lease_seconds)

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
        ahead: asyncio.Task[None] | None = None
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
                embedded = await self._embed_all([c for p in slices.values() for c in p.to_embed])
            except Exception:
                # Perhaps one session's text is what fails (a provider refusing it, a bad
                # row): each on its own, so only that one backs off.
                for n, piece in list(slices.items()):
                    try:
                        embedded.update(await self._embed_all(piece.to_embed))
                    except Exception:
                        failed(n)
            ahead = self._look_ahead(claims, slices)
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
        except BaseException:
            if ahead is not None:
                ahead.cancel()  # the pass is failing or being cancelled: no waiting on it
            raise
        finally:
            for n, claim in enumerate(claims):
                if n not in released:
                    with contextlib.suppress(Exception):
                        await self._release(claim, retry.get(n))
            if ahead is not None:
                await self._finish_ahead(ahead)
        return done, cut

    def _look_ahead(
        self, claims: list[Claim], slices: dict[int, _Slice]
    ) -> asyncio.Task[None] | None:
        """Embed the next slice of each session this pass leaves a backlog in, into the
        line cache, while the pass writes: with a model in another process (an embedding
        server), its calls and the writes overlap instead of taking turns (a bulk import of
        one session: 181-189 -> 226-241 msg/s, bench/README.md). Not with the bundled
        model: it shares this process's two cores with the writes, measured the same
        either way (272-276 msg/s), and would only crowd the requests served beside it.
        Only a cache is filled: the next pass reads and plans its slice as always, and
        finds its lines embedded."""
        behind = [(claims[n], p.upto) for n, p in slices.items() if p.upto < claims[n].last_seq]
        if not behind or self.stop.is_set() or self.embedder.local:
            return None
        return asyncio.create_task(self._warm_next(behind), name="strata-promotion-ahead")

    async def _warm_next(self, behind: list[tuple[Claim, int]]) -> None:
        budget = self.recent_lines.size // 2
        lines: list[str] = []
        async with self.db.read() as tx:
            for claim, upto in behind:
                rows = await message_store.seq_range(
                    tx,
                    claim.tenant_id,
                    claim.user_id,
                    claim.session_id,
                    after_seq=upto,
                    upto_seq=min(claim.last_seq, upto + self.config.worker_batch_messages),
                )
                new = slice_by_chars([log_message(r) for r in rows], self.config.worker_slice_chars)
                lines += [m.line for m in new if m.role in INDEXED_ROLES]
                if len(lines) >= budget:
                    break
        await warm_lines(self.embedder, lines[:budget], self.recent_lines)

    async def _finish_ahead(self, ahead: asyncio.Task[None]) -> None:
        """Let the look-ahead finish (it ran beside the writes, so it is mostly done),
        unless the worker is or starts stopping meanwhile; its failure costs only its cache
        entries."""
        stopping = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({ahead, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not ahead.done():
                ahead.cancel()  # stopping, or this pass itself is being cancelled
        try:
            await ahead
        except asyncio.CancelledError:
            if not ahead.cancelled():
                raise  # this pass itself is being cancelled
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        except Exception:
            log.debug("embedding the next slices ahead failed", exc_info=True)

    async def _release(self, claim: Claim, retry_at: datetime | None) -> None:
        async with self.db.transaction() as tx:
            await session_store.release_lease(
                tx,
                tenant_id=claim.tenant_id,
                user_id=claim.user_id,
                session_id=claim.session_id,
                owner=self.owner,
                retry_at=retry_at,
            )

    def _retry_at(self, failures: int) -> datetime:
        wait = backoff_seconds(
            failures,
            base=self.config.promote_retry_base_seconds,
            cap=self.config.promote_retry_max_seconds,
        )
        return datetime.now(UTC) + timedelta(seconds=wait)

    async def promote(self, claim: Claim) -> int:
        """One slice of the session's backlog; returns how many messages it indexed."""
        piece = await self._slice(claim)
        if piece is None:
            return 0
        done = await self._promote_slice(claim, piece, await self._embed_all(piece.to_embed))
        return done or 0

    async def _slice(self, claim: Claim) -> _Slice | None:
        """The session's next slice, chunked (None: nothing to do)."""
        cursor = claim.indexed_seq
        if cursor >= claim.last_seq or self.stop.is_set():
            return None
        upto = min(claim.last_seq, cursor + self.config.worker_batch_messages)
        lookback = context_lookback(self.config.index)
        ahead = context_lookahead(self.config.index)
        async with self.db.read() as tx:
            rows = await message_store.seq_range(
                tx,
                claim.tenant_id,
                claim.user_id,
                claim.session_id,
                # With the next turn on, the turn before the slice is re-planned: its own
                # context too.
                after_seq=max(0, cursor - (2 * lookback + 1 if ahead else lookback)),
                upto_seq=upto,
            )
            log_messages = [log_message(r) for r in rows]
            deleted: set[int] = set()
            before: PointPlan | None = None
            watch: list[uuid.UUID] = []
            if ahead and any(m.seq > cursor and m.role in INDEXED_ROLES for m in log_messages):
                deleted, before, watch = await self._turn_before(tx, claim, log_messages, cursor)
        context = [m for m in log_messages if m.seq <= cursor and m.seq not in deleted]
        pending = [m for m in log_messages if m.seq > cursor]
        new = slice_by_chars(pending, self.config.worker_slice_chars)
        # The whole range when it all fits (stepping over any gap in the log), else up to
        # the last message of the slice.
        new_upto = upto if len(new) == len(pending) else new[-1].seq
        # Off the event loop: ~0.17 ms a turn (its importance's patterns, mostly), so a
        # 256-turn slice held the loop ~40 ms, and the api shares it with this worker.
        chunks = await asyncio.to_thread(
            functools.partial(
                chunk_turns,
                claim.tenant_id,
                claim.incarnation,
                context,
                new,
                dense_context=self.config.index.dense_context_turns,
                sparse_context=self.config.index.sparse_context_turns,
                next_within=ahead,
                back_within=lookback,
            )
        )
        extract = self.extract_facts and any(m.role == "user" for m in new)
        said: list[Said] = []
        if self.graph is not None and any(m.role == "user" for m in new):
            # Off the event loop too: ~0.1 ms an English turn, ~0.3 ms a Chinese one
            # (bench/README.md, "Offline graph extraction").
            said = await asyncio.to_thread(self.graph.extract, new)
        if not chunks:
            before, watch = None, []
        return _Slice(chunks, cursor, new_upto, len(new), extract, before, watch, said)

    async def _turn_before(
        self, tx: AsyncSession, claim: Claim, messages: list[LogMessage], cursor: int
    ) -> tuple[set[int], PointPlan | None, list[uuid.UUID]]:
        """Of the promoted turns read (seq ≤ `cursor`): those whose memory was deleted (no
        one's context any more, as a reindex leaves them out), and the plan of the last
        live one's point rebuilt with its next turn, the slice's first. None when that turn
        has no memory of its own (merged into another) or a caller rewrote it (its entry is
        its content alone)."""
        key = (claim.tenant_id, claim.user_id, claim.session_id)
        done = [m for m in messages if m.seq <= cursor and m.role in INDEXED_ROLES]
        ids = {
            memory_id(claim.tenant_id, claim.session_id, claim.incarnation, m.seq): m.seq
            for m in done
        }
        found = await memory_store.get_many(tx, claim.tenant_id, list(ids), user_id=claim.user_id)
        rows = {ids[r.id]: r for r in found}
        deleted = {seq for seq, r in rows.items() if r.deleted_at is not None}
        watch = [i for i, seq in ids.items() if seq in rows and seq not in deleted]
        last = next((m for m in reversed(done) if m.seq not in deleted), None)
        first = next(m for m in messages if m.seq > cursor and m.role in INDEXED_ROLES)
        ahead = context_lookahead(self.config.index)
        if last is None or last.seq not in rows or first.seq - last.seq > ahead:
            return deleted, None, watch  # (too far back: the slice is not its next turn)
        logs = {key: {m.seq: m for m in messages if m.seq not in deleted}}
        plan = self.reindexer.plan_one(rows[last.seq], logs, {key: claim.incarnation})
        return deleted, (plan if plan.role is not None else None), watch

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
        before = None
        if piece.before is not None and piece.before.chunk.id in embedded:
            vector, turn = embedded[piece.before.chunk.id]
            before = _Before(piece.before, vector, turn)
        written = await self._write(
            claim,
            kept,
            vectors,
            turns,
            piece.cursor,
            piece.upto,
            extract=piece.extract,
            before=before,
            watch=piece.watch,
            said=piece.said,
        )
        if not written:
            log.info("lease on %s lost; another worker goes on", claim.session_id)
            return None
        if self.signals is not None:
            await self.signals.indexed(claim.tenant_id, claim.user_id, claim.session_id, piece.upto)
        return piece.count

    async def _embed_all(
        self, chunks: list[Chunk]
    ) -> dict[uuid.UUID, tuple[list[float], list[float] | None]]:
        """Each chunk's indexed vector and its turn's own vector, by chunk id."""
        kept, vectors, turns = await embed_chunks(
            self.embedder,
            chunks,
            self.config.index.dense_context_weight,
            self.recent_lines,
            self.config.index.dense_next_weight,
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
        before: _Before | None = None,
        watch: list[uuid.UUID] | None = None,
        said: list[Said] | None = None,
    ) -> bool:
        """Read what exists, plan (pure), then write: the points, then one transaction.

        False when the batch was rolled back because the lease was lost or a merge target
        vanished; the next pass redoes it.
        """
        done, same_text = await self._existing(claim, chunks)
        plan = await asyncio.to_thread(
            plan_batch, chunks, vectors, done, same_text, self.config.dedupe_threshold
        )
        # Term vectors of long texts take tens of milliseconds each: off the event loop,
        # which the api shares with an in-process worker.
        points = await asyncio.to_thread(self._points, claim, plan.fresh, turns, before)
        # The rows and their events are built before the transaction: SQLite's one writer,
        # which every ingest waits for, is held for the statements alone. Before the points
        # are written, too: a failure or a cancellation here leaves nothing to undo.
        if self.db.dialect == "sqlite":
            rows = await asyncio.to_thread(_Rows.of, claim, plan.fresh, self.clock(), sqlite=True)
        else:
            rows = _Rows.of(claim, plan.fresh, self.clock(), sqlite=False)
        # Index first (idempotent: deterministic ids), then the canonical rows and the
        # watermark atomically, under the lease.
        await self.vectors.upsert(points)
        row = before.plan.row if before is not None else None
        fresh = [m.chunk.id for m in plan.fresh]
        try:
            async with self.db.transaction() as tx:
                unchanged = await self._commit(tx, claim, plan, from_seq, to_seq, rows, row)
                if extract:
                    await enqueue_extraction(
                        tx, claim, from_seq, to_seq, max_attempts=self.config.job_max_attempts
                    )
                facts = await self._write_graph(tx, claim, said)
        except (_Stale, _LeaseLost):
            # Perhaps the session was deleted meanwhile: then its fresh points must go too.
            await self._forget_points_of_gone_session(claim, fresh)
            if row is not None:
                await self._rebuild(claim.tenant_id, [row.id])
            return False
        except BaseException:
            with contextlib.suppress(Exception):
                await self._forget_points_of_gone_session(claim, fresh)
            if row is not None:
                await self._rebuild(claim.tenant_id, [row.id])
            raise
        # A context turn deleted since the read: the points that carried its words (the
        # turn before, the new turns) again from the rows; the turn before also when its
        # own row changed.
        gone = await self._gone(claim, watch)
        again = fresh if gone else []
        if row is not None and (gone or not unchanged):
            again = [row.id, *again]
        # The new facts' points, from their rows (a failure leaves a fact recall misses
        # until a reindex, never a point without its row).
        again += facts
        if again:
            await self._rebuild(claim.tenant_id, again)
        return True

    async def _gone(self, claim: Claim, watch: list[uuid.UUID] | None) -> bool:
        """Whether a context turn read for the slice is deleted now. Read after the commit,
        not in the transaction, so SQLite's writer is not held for it (docs/reliability.md,
        "The worker's own thread"): a deletion committed before ours is seen as before, and
        one committed since is seen too, which only rebuilds again what that deletion's own
        rebuild of its neighbours wrote (from the same rows). On PostgreSQL the read in the
        transaction could miss a deletion committed between it and our commit; this one
        cannot. Unread (the database failing), the points are rebuilt as if one were."""
        if not watch:
            return False
        try:
            async with self.db.read() as tx:
                return bool(
                    await memory_store.deleted_among(tx, claim.tenant_id, claim.user_id, watch)
                )
        except Exception:
            log.warning("could not read the slice's context turns", exc_info=True)
            return True

    def _points(
        self,
        claim: Claim,
        fresh: list[NewMemory],
        turns: dict[uuid.UUID, list[float]],
        before: _Before | None,
    ) -> list[VectorPoint]:
        """The batch's points: its new memories', and the turn before's when it changed."""
        points = [self._point(claim, m, turns.get(m.chunk.id)) for m in fresh]
        if before is not None:
            points.append(self._before_point(before))
        if self.warm_scoring and len(fresh) <= WARM_SCORING_TURNS:
            for m in fresh:  # a conversation's pass, not an import's slice
                text_facts(m.chunk.content, m.chunk.role)
        return points

    async def _write_graph(
        self, tx: AsyncSession, claim: Claim, said: list[Said] | None
    ) -> list[uuid.UUID]:
        """The batch's statements into the graph, in the batch's transaction: the ids of
        the facts it wrote (none without a graph)."""
        if not said or self.graph is None:
            return []
        written = await self.graph.write(
            tx,
            claim.tenant_id,
            claim.user_id,
            claim.session_id,
            claim.incarnation,
            said,
            self.clock(),
        )
        return written.facts

    def _before_point(self, before: _Before) -> VectorPoint:
        plan = before.plan
        return chunk_point(
            plan.row.id,
            plan.chunk,
            before.vector,
            before.turn,
            MemoryPayload.from_row(plan.row, role=plan.role),
            self.config.index.sparse_context_weight,
            self.config.index.sparse_next_weight,
        )

    async def _rebuild(self, tenant_id: str, ids: list[uuid.UUID]) -> None:
        """Points written from what a slice read, when that changed before the commit (or
        the batch did not commit): each rebuilt from its row as it is now, or removed
        (deleted, erased with its session, never inserted), as a reindex would. A failure
        is logged: the batch's own outcome stands, and a point left behind is what a
        reindex rebuilds."""
        try:
            async with self.db.read() as tx:
                found = {m.id: m for m in await memory_store.get_many(tx, tenant_id, ids)}
            live = [found[i] for i in ids if i in found and found[i].deleted_at is None]
            gone = [i for i in ids if i not in found or found[i].deleted_at is not None]
            if gone:
                await self.vectors.delete(gone)
            if live:
                await self.reindexer.rebuild_rows(live)
        except Exception:
            log.warning("could not rebuild the points of %d memories", len(ids), exc_info=True)

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
        self,
        tx: AsyncSession,
        claim: Claim,
        plan: Plan,
        from_seq: int,
        to_seq: int,
        rows: _Rows,
        before: Memory | None = None,
    ) -> bool:
        """The batch's rows, its merges, their events and the watermark: one transaction,
        valid only while we hold the lease. Returns whether the point re-pointed from `before`
        (the row of the turn before the slice) stands, under its lock (`_merge`)."""
        now = rows.now
        if not await session_store.advance_watermark(
            tx,
            tenant_id=claim.tenant_id,
            user_id=claim.user_id,
            session_id=claim.session_id,
            owner=self.owner,
            from_seq=from_seq,
            to_seq=to_seq,
            lease_until=self._lease_until(),
            release=True,
        ):
            raise _LeaseLost
        await _insert(tx, rows)
        merged, patches, unchanged = await self._merge(tx, claim, plan.merges, now, before)
        await memory_store.add_events(tx, merged)
        # Under the row locks, before the commit: if the index fails, nothing moves.
        await self.vectors.set_payload(patches, owner=(claim.tenant_id, claim.user_id))
        return unchanged

    async def _merge(
        self,
        tx: AsyncSession,
        claim: Claim,
        gains: dict[uuid.UUID, Gain],
        now: datetime,
        before: Memory | None,
    ) -> tuple[list[AuditEvent], list[tuple[uuid.UUID, PayloadPatch]], bool]:
        """Apply each gain to its memory as it is now, under a row lock, not as read before
        the plan; returns the events and the index updates of the memories that changed,
        and whether the point written for `before` stands: its row is as read, or only its
        payload moved and is patched here (locked with them, in one id order)."""
        ids = [*gains, *([before.id] if before is not None and before.id not in gains else [])]
        locked = await memory_store.lock_live(tx, claim.tenant_id, claim.user_id, ids)
        found = {m.id: m for m in locked}
        live = [m for m in locked if m.id in gains]
        if len(live) != len(gains):
            raise _Stale  # a merge target was deleted meanwhile: redo the batch
        events: list[AuditEvent] = []
        patches: list[tuple[uuid.UUID, PayloadPatch]] = []
        now_before = found.get(before.id) if before is not None else None
        unchanged = before is None or (now_before is not None and _same_point(before, now_before))
        if (
            not unchanged
            and before is not None
            and now_before is not None
            and now_before.content == before.content
        ):
            # Only its payload moved since the read (a reinforcement flush, a PATCH of its
            # metadata): the point written from the read takes the row's payload here,
            # under the lock, instead of being rebuilt after the commit.
            patches.append((now_before.id, MemoryPayload.from_row(now_before).as_patch()))
            unchanged = True
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
        return events, patches, unchanged

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
            chunk.id,
            chunk,
            memory.vector,
            turn,
            payload,
            self.config.index.sparse_context_weight,
            self.config.index.sparse_next_weight,
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
            session = await session_store.get(tx, claim.tenant_id, claim.user_id, claim.session_id)
        if session is None or session.incarnation != claim.incarnation:
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


# A pass of at most this many new turns (a conversation's) warms scoring's text facts; an
# import's larger slices do not push a service's recalled memories out of that memo.
WARM_SCORING_TURNS = 64


@dataclass(frozen=True, slots=True)
class _Rows:
    """A batch's new rows and their "created" events, and the time they record."""

    now: datetime
    values: list[memory_store.MemoryValues]
    created: list[AuditEvent]
    bound: memory_store.BoundRows | None = None  # `values` bound for SQLite, ahead
    bound_created: list[tuple[Any, ...]] | None = None  # and `created`

    @staticmethod
    def of(claim: Claim, fresh: list[NewMemory], now: datetime, *, sqlite: bool) -> _Rows:
        """The rows; on SQLite also their values as its driver takes them, converted
        here rather than under the writer lock (`memory_store.bind_for_sqlite`)."""
        values = [Promoter._row(claim, m, now) for m in fresh]
        created = [Promoter._created(claim, m, now) for m in fresh]
        bound = memory_store.bind_for_sqlite(values) if sqlite and values else None
        if bound is None:
            return _Rows(now, values, created)
        return _Rows(now, values, created, bound, memory_store.bind_events_for_sqlite(created))


async def _insert(tx: AsyncSession, rows: _Rows) -> set[uuid.UUID]:
    """The batch's rows and their "created" events; returns the ids inserted. A replayed
    batch re-inserts nothing, so it must not re-log "created" either."""
    if rows.bound is not None and rows.bound_created is not None:
        inserted = await memory_store.insert_bound(tx, rows.bound)
        events = zip(rows.created, rows.bound_created, strict=True)
        await memory_store.add_bound_events(
            tx, [bound for e, bound in events if e.memory_id in inserted]
        )
    else:
        inserted = await memory_store.insert_many(tx, rows.values)
        await memory_store.add_events(tx, [e for e in rows.created if e.memory_id in inserted])
    return inserted


@dataclass(frozen=True, slots=True)
class _Before:
    """The turn before a slice, planned again with its next turn, and its embedded vectors."""

    plan: PointPlan
    vector: list[float]
    turn: list[float] | None


def _same_point(read: Memory, now: Memory) -> bool:
    """Whether a point built from `read` is the one `now` would give."""
    return read.content == now.content and MemoryPayload.from_row(read) == MemoryPayload.from_row(
        now
    )


class _Stale(Exception):
    """Rolls back a batch whose merge target changed under it; the next pass redoes it."""


class _LeaseLost(Exception):
    """Rolls back a batch whose session another worker has taken over."""
