"""Sessions and message ingest: the log first, then the buffer, then a wake-up.

Durability order (docs/architecture.md §2): a message is committed to the log before it
touches Redis; Redis failing after the commit loses nothing (the window is rebuilt from the
log), so it is logged and the request still succeeds.
"""

from __future__ import annotations

import logging
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from app.core import periods
from app.core.erasure import DetachPlan, plan_detach, plan_summaries
from app.core.graph import detach_session
from app.core.periods import Level
from app.errors import (
    AppError,
    BufferUnavailable,
    InvalidInput,
    SessionNotFound,
    TooManyCharacters,
    UserErasureInProgress,
)
from app.schemas.ingest import (
    IngestRequest,
    IngestResponse,
    MessageIn,
    MessageOut,
    MessagePage,
    SessionDeleted,
    SessionOut,
    SessionUpsert,
)
from app.services.cursors import encode_cursor, one_int
from app.stores import graph as graph_store
from app.stores import memories as memory_store
from app.stores import messages as message_store
from app.stores import sessions as session_store
from app.stores import summaries as summary_store
from app.stores import users as user_store
from app.stores.buffer import Buffer
from app.stores.db import Database
from app.stores.models import Message, Session, Summary
from app.stores.one_hop import Unwritten
from app.stores.signals import Signals
from app.stores.vectors import PayloadPatch, VectorIndex

log = logging.getLogger("strata.ingest")

# Queues the `summarize` job of (tenant, user, level, first local day of the period).
SummaryEnqueue = Callable[[str, str, Level, date | None], Awaitable[object]]


def session_out(row: Session) -> SessionOut:
    return SessionOut(
        id=row.id,
        user_id=row.user_id,
        system_prompt=row.system_prompt,
        metadata=row.metadata_,
        last_seq=row.last_seq,
        indexed_seq=row.indexed_seq,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def message_out(row: Message) -> MessageOut:
    return MessageOut(
        id=row.client_id or f"seq:{row.seq}",
        seq=row.seq,
        role=row.role,
        content=row.content,
        created_at=row.created_at,
        metadata=row.metadata_,
    )


def buffer_entry(row: Message) -> dict[str, Any]:
    return message_out(row).model_dump(mode="json")


def _row(
    tenant_id: str, session_id: str, user_id: str, m: MessageIn, seq: int, now: datetime
) -> dict[str, Any]:
    """A message's row, keyed by the model's attribute names (`metadata_`)."""
    return {
        "tenant_id": tenant_id,
        "session_id": session_id,
        "seq": seq,
        "client_id": m.id,
        "user_id": user_id,
        "role": m.role,
        "content": m.content,
        "metadata_": m.metadata,
        "created_at": m.created_at or now,
        "received_at": now,
    }


def _index_changes(plan: DetachPlan) -> list[tuple[uuid.UUID, PayloadPatch]]:
    unfiled = [(mid, PayloadPatch(session_id=None)) for mid in plan.unfile]
    shrunk = [(m.id, PayloadPatch(sources=m.sources, session_id=m.session_id)) for m in plan.shrink]
    return unfiled + shrunk


async def writable(tx: Any, tenant_id: str, user_id: str, now: datetime) -> None:
    """The user, created if new; refused while an erasure of theirs runs (docs/privacy.md)."""
    erasure = await user_store.ensure_writable(tx, tenant_id, user_id, now)
    if erasure is not None:
        raise UserErasureInProgress(user_id, erasure.get("job_id"))


@dataclass(frozen=True, slots=True)
class IngestConfig:
    """The settings ingest reads (app/settings.py; built in app/wiring.py)."""

    ingest_max_chars: int  # a request's message content, at most (more is a 413)
    buffer_window: int  # the newest messages a session's window keeps
    wait_timeout_seconds: float  # the longest `wait=true`
    wait_poll_seconds: float


class _NothingNew(Exception):
    """Every message of the request was stored before: roll back the session's advance."""

    def __init__(self, last_seq: int) -> None:
        super().__init__(last_seq)
        self.last_seq = last_seq


class IngestService:
    """Sessions and their message log. Owns the write path's ordering: log, buffer, wake-up."""

    def __init__(
        self,
        db: Database,
        buffer: Buffer,
        vectors: VectorIndex,
        config: IngestConfig,
        signals: Signals,
        enqueue_summary: SummaryEnqueue | None = None,
    ) -> None:
        self.db = db
        self.buffer = buffer
        self.vectors = vectors
        self.config = config
        self.signals = signals
        self.enqueue_summary = enqueue_summary

    async def upsert_session(
        self, tenant_id: str, session_id: str, body: SessionUpsert
    ) -> tuple[SessionOut, bool]:
        """Create or update; returns (session, created)."""
        now = datetime.now(UTC)
        async with self.db.transaction() as tx:
            # The user's own session of this id: another user's of the same id is another
            # session (docs/security.md), so nothing here tells whether it exists.
            row, created = await session_store.create_or_lock(
                tx,
                tenant_id=tenant_id,
                session_id=session_id,
                user_id=body.user_id,
                system_prompt=body.system_prompt,
                metadata=body.metadata,
                now=now,
            )
            await writable(tx, tenant_id, body.user_id, now)
            if created:
                return session_out(row), True
            changes: session_store.SessionChanges = {}
            if "system_prompt" in body.model_fields_set:
                changes["system_prompt"] = body.system_prompt
            if "metadata" in body.model_fields_set:
                changes["metadata_"] = body.metadata
            row = await session_store.update(tx, tenant_id, body.user_id, session_id, changes, now)
            return session_out(row), False

    async def get_session(
        self, tenant_id: str, session_id: str, user_id: str, *, wait: bool = False
    ) -> SessionOut:
        """With `wait`, once the index has caught up with the log as it is now (or the
        wait times out): the bulk-import path's one wait after many unwaited batches."""
        async with self.db.read() as tx:
            session = session_out(await self._owned(tx, tenant_id, session_id, user_id))
        if wait and session.indexed_seq < session.last_seq:
            await self._wait_indexed(tenant_id, user_id, session_id, session.last_seq)
            async with self.db.read() as tx:
                session = session_out(await self._owned(tx, tenant_id, session_id, user_id))
        return session

    @staticmethod
    async def _owned(
        tx: Any, tenant_id: str, session_id: str, user_id: str, *, lock: bool = False
    ) -> Session:
        row = await session_store.get(tx, tenant_id, user_id, session_id, for_update=lock)
        if row is None:
            raise SessionNotFound(session_id)
        return row

    async def delete_session(self, tenant_id: str, session_id: str, user_id: str) -> SessionDeleted:
        """The session, its log, its window, the memories derived only from it, and the
        summaries citing it (their periods are then summarised again without it)."""
        now = datetime.now(UTC)
        async with self.db.transaction() as tx:
            # The lock makes a worker promoting this session wait, then find it gone.
            await self._owned(tx, tenant_id, session_id, user_id, lock=True)
            plan = await self._detach_memories(tx, tenant_id, user_id, session_id, now)
            summaries = await self._detach_summaries(tx, tenant_id, user_id, session_id)
            await self._detach_graph(tx, tenant_id, user_id, session_id)
            count = await message_store.delete_session(tx, tenant_id, user_id, session_id)
            await session_store.delete(tx, tenant_id, user_id, session_id)
            # The index follows the canonical rows inside the transaction: if Qdrant is down,
            # nothing is deleted and the caller may retry.
            await self.vectors.set_payload(_index_changes(plan), owner=(tenant_id, user_id))
            await self.vectors.delete([*plan.erase, *(s.id for s in summaries)])
        try:
            await self.buffer.drop(tenant_id, user_id, session_id)
        except BufferUnavailable:  # the window expires by TTL anyway
            log.warning("could not drop the buffer of session %s", session_id, exc_info=True)
        await self._resummarize(tenant_id, user_id, summaries)
        return SessionDeleted(
            session_id=session_id,
            messages=count,
            memories=len(plan.erase),
            summaries=len(summaries),
        )

    @staticmethod
    async def _detach_summaries(
        tx: Any, tenant_id: str, user_id: str, session_id: str
    ) -> list[Summary]:
        """Delete the rows of the summaries citing the session (`plan_summaries`): only
        the user's summaries over the span of its messages can."""
        span = await summary_store.session_span(tx, tenant_id, user_id, session_id)
        if span is None:
            return []
        candidates = await summary_store.lock_covering(tx, tenant_id, user_id, *span)
        doomed = plan_summaries(candidates, session_id)
        await summary_store.delete_ids(tx, tenant_id, user_id, [s.id for s in doomed])
        return doomed

    @staticmethod
    async def _detach_graph(tx: Any, tenant_id: str, user_id: str, session_id: str) -> None:
        """Relations extracted from the session (docs/facts.md) go with it."""
        cited = await graph_store.lock_of_session(tx, tenant_id, user_id, session_id)
        doomed, shrink = detach_session(cited, session_id)
        await graph_store.detach(tx, tenant_id, user_id, doomed, shrink)

    async def _resummarize(self, tenant_id: str, user_id: str, removed: list[Summary]) -> None:
        """After the commit, queue the removed summaries' periods again, lower levels
        first: a day still holding other sessions' messages gets its daily back, a day
        with none stays without. A failure is logged, not raised: the delete is done, and
        the hourly sweep or `POST /v1/summarize` regenerates them."""
        if self.enqueue_summary is None or not removed:
            return
        order = {"daily": 0, "weekly": 1, "essence": 2}
        for s in sorted(removed, key=lambda s: (order.get(s.level, 3), s.period_start)):
            level: Level = s.level  # type: ignore[assignment]
            day = (
                None
                if level == "essence"
                else periods.local_day(s.period_start, periods.zone(s.timezone))
            )
            try:
                await self.enqueue_summary(tenant_id, user_id, level, day)
            except AppError:
                log.warning(
                    "could not queue the %s summary of %s for %s again; the sweep will",
                    level,
                    day,
                    user_id,
                    exc_info=True,
                )

    @staticmethod
    async def _detach_memories(
        tx: Any, tenant_id: str, user_id: str, session_id: str, now: datetime
    ) -> DetachPlan:
        """Forget what was derived from the session (`app.core.erasure`), in the rows."""
        derived = await memory_store.lock_of_session(tx, tenant_id, user_id, session_id)
        plan = plan_detach(derived, session_id, now)
        await memory_store.erase(tx, tenant_id, user_id, plan.erase)
        await memory_store.unfile(tx, tenant_id, user_id, plan.unfile, now)
        for memory in plan.shrink:
            changes: memory_store.MemoryChanges = {
                "sources": memory.sources,
                "session_id": memory.session_id,
                "updated_at": now,
            }
            await memory_store.update_fields(tx, tenant_id, user_id, memory.id, changes)
        await memory_store.add_events(tx, plan.events)
        return plan

    async def add_messages(
        self, tenant_id: str, session_id: str, body: IngestRequest
    ) -> IngestResponse:
        total = sum(len(m.content) for m in body.messages)
        if total > self.config.ingest_max_chars:
            raise TooManyCharacters(total, self.config.ingest_max_chars)
        now = datetime.now(UTC)
        try:
            one = None
            if len(body.messages) == 1 and self.db.writes_in_one:
                one = await self._append_one(tenant_id, session_id, body, now)
            if one is not None:
                rows = [one]
            else:
                async with self.db.transaction() as tx:
                    rows = await self._append(tx, tenant_id, session_id, body, now)
        except _NothingNew as nothing:  # a retry of stored messages: nothing was written
            rows, last_seq = [], nothing.last_seq
        else:
            last_seq = rows[-1]["seq"]
            await self._after_commit(tenant_id, body.user_id, session_id, rows, urgent=body.wait)
        response = IngestResponse(
            accepted=len(rows), duplicates=len(body.messages) - len(rows), last_seq=last_seq
        )
        if body.wait:
            response.indexed_seq = await self._wait_indexed(
                tenant_id, body.user_id, session_id, last_seq, hurried=bool(rows)
            )
        return response

    async def _append_one(
        self, tenant_id: str, session_id: str, body: IngestRequest, now: datetime
    ) -> dict[str, Any] | None:
        """SQLite: the usual call (one message, to a known session of a known user who is
        not being erased, not stored before) in one hop to SQLite's thread
        (`Database.write_in_one`, app/stores/one_hop.py): the session's advance, the user's
        check and the insert as `_append` runs them. The row written, or None when it wrote
        nothing and `_append` should take the call (a new session or user, an erasure
        running, a retry), which then answers it as it always did."""
        user_id = body.user_id

        def work(conn: sqlite3.Connection) -> dict[str, Any]:
            base = session_store.reserve_seqs_in(conn, tenant_id, user_id, session_id, 1, now)
            if base is None or not user_store.known_and_writable_in(conn, tenant_id, user_id):
                raise Unwritten
            row = _row(tenant_id, session_id, user_id, body.messages[0], base + 1, now)
            if not message_store.insert_new_in(conn, row):
                raise Unwritten
            return row

        return await self.db.write_in_one(work)

    async def _append(
        self, tx: Any, tenant_id: str, session_id: str, body: IngestRequest, now: datetime
    ) -> list[dict[str, Any]]:
        """Write the new messages and advance the session; the rows written, never none
        (`_NothingNew` rolls the transaction back instead).

        A known session takes one statement (`reserve_seqs`: lock, ownership, advance by
        the whole batch); a new one takes `create_or_lock`. When some
        messages turn out to be stored already, the advance is corrected to what was
        written, so `last_seq` never skips a number.
        """
        n = len(body.messages)
        base = await session_store.reserve_seqs(tx, tenant_id, body.user_id, session_id, n, now)
        reserved = base is not None
        if base is None:
            session, _ = await session_store.create_or_lock(
                tx,
                tenant_id=tenant_id,
                session_id=session_id,
                user_id=body.user_id,
                system_prompt=None,
                metadata={},
                now=now,
            )
            base = session.last_seq
        # After the session's lock, as the erasure takes them: no deadlock between them.
        await writable(tx, tenant_id, body.user_id, now)

        client_ids = [m.id for m in body.messages if m.id is not None]
        # One message with an id (an agent's usual call, perhaps a retry): the insert itself
        # tells whether it is stored already (`insert_new`), one statement fewer.
        one = n == 1 and len(client_ids) == 1
        seen = (
            set()
            if one
            else await message_store.existing_client_ids(
                tx, tenant_id, body.user_id, session_id, client_ids
            )
        )
        rows: list[dict[str, Any]] = []
        seq = base
        for m in body.messages:
            if m.id is not None:
                if m.id in seen:
                    continue
                seen.add(m.id)
            seq += 1
            rows.append(_row(tenant_id, session_id, body.user_id, m, seq, now))
        if not rows:
            raise _NothingNew(base)
        if one:
            if not await message_store.insert_new(tx, rows[0]):
                raise _NothingNew(base)  # a retry: the session's advance is rolled back
        else:
            await message_store.insert_many(tx, rows)
        if not reserved or len(rows) != n:
            await session_store.advance_last_seq(tx, tenant_id, body.user_id, session_id, seq, now)
        return rows

    async def _after_commit(
        self,
        tenant_id: str,
        user_id: str,
        session_id: str,
        rows: list[dict[str, Any]],
        *,
        urgent: bool,
    ) -> None:
        """The new turns into the buffer, and the workers woken (`urgent`: the request will
        wait for them to be indexed, so a worker gathering a trickle goes on at once)."""
        entries = [
            MessageOut(
                id=r["client_id"] or f"seq:{r['seq']}",
                seq=r["seq"],
                role=r["role"],
                content=r["content"],
                created_at=r["created_at"],
                metadata=r["metadata_"],
            ).model_dump(mode="json")
            for r in rows
        ]
        if urgent:
            # Before the push: its echo over Redis may wake this process's worker before the
            # push returns, and the flag must be up before that pass starts (the pass takes
            # it down), or it would end the pause after the pass instead.
            self.signals.urgent.set()
        try:
            # With `wake`, the pipeline also tells the workers of other processes.
            await self.buffer.push(
                tenant_id, user_id, session_id, entries, wake=True, urgent=urgent
            )
        except BufferUnavailable:
            log.warning("buffer unavailable after commit; the log has the messages", exc_info=True)
            # The workers' poll still finds the backlog; a wake-up only saves the wait.
        finally:
            # An in-process worker starts now: after the push, so that its pass does not
            # share the event loop with the rest of this request (it reads the log anyway).
            self.signals.work_arrived()

    async def _wait_indexed(
        self, tenant_id: str, user_id: str, session_id: str, target: int, *, hurried: bool = False
    ) -> int:
        """Wait until the watermark reaches `target` or the wait times out.

        The worker wakes us when it commits an advance of this session (`Signals`), with
        the watermark it committed, so the answer follows the indexing at once and without
        another read; the watermark is also re-read every `wait_poll_seconds` in case a
        wake-up was lost. On time-out the answer is still a success (the messages are in
        the log) and carries the watermark reached, so the caller sees the lag instead of
        an error.
        """
        deadline = time.monotonic() + self.config.wait_timeout_seconds
        with self.signals.watch(tenant_id, user_id, session_id) as watch:
            while True:
                async with self.db.read() as tx:
                    indexed = await session_store.indexed_seq(tx, tenant_id, user_id, session_id)
                left = deadline - time.monotonic()
                if indexed is None or indexed >= target or left <= 0:
                    return indexed or 0
                if not hurried:  # a worker gathering a trickle of messages goes on now
                    await self.signals.hurry()
                    hurried = True
                await watch.wait(min(left, self.config.wait_poll_seconds))
                if watch.seq >= target:
                    return watch.seq

    async def list_messages(
        self,
        tenant_id: str,
        session_id: str,
        user_id: str,
        cursor: str | None,
        before_seq: int | None,
        limit: int,
    ) -> MessagePage:
        """A page of the history, newest last; the next page holds the older messages. The
        `cursor` is the lists' own (`app.services.cursors`); `before_seq`, a seq, is kept for
        callers that page by seq. Both at once is a 422: they would disagree."""
        after = one_int(cursor, low=1)
        if after is not None:
            if before_seq is not None:
                raise InvalidInput(
                    "before_seq", "give `cursor` or `before_seq`, not both", source="query"
                )
            before_seq = after
        async with self.db.read() as tx:
            await self._owned(tx, tenant_id, session_id, user_id)
            rows = await message_store.page(
                tx, tenant_id, user_id, session_id, before_seq=before_seq, limit=limit + 1
            )
        more = len(rows) > limit
        rows = rows[1:] if more else rows
        return MessagePage(
            items=[message_out(r) for r in rows],
            next_cursor=encode_cursor(rows[0].seq) if more and rows else None,
        )

    async def recent_until(
        self, tenant_id: str, user_id: str, session_id: str, until: datetime, n: int
    ) -> list[MessageOut]:
        """The newest `n` messages created at or before `until`, from the log (replays)."""
        async with self.db.read() as tx:
            rows = await message_store.page(
                tx, tenant_id, user_id, session_id, until=until, limit=n
            )
        return [message_out(r) for r in rows]

    async def last_user_message(
        self, tenant_id: str, user_id: str, session_id: str, until: datetime | None
    ) -> MessageOut | None:
        async with self.db.read() as tx:
            row = await message_store.last_of_role(
                tx, tenant_id, user_id, session_id, "user", until=until
            )
        return message_out(row) if row is not None else None

    async def recent(self, tenant_id: str, session: SessionOut, n: int) -> list[MessageOut]:
        """The session's newest `n` messages from the buffer, rebuilt from the log when the
        window is missing or behind (Redis flushed, evicted, or a push that failed)."""
        n = min(n, self.config.buffer_window)
        if session.last_seq == 0:
            return []
        try:
            window = await self.buffer.recent(tenant_id, session.user_id, session.id, n)
        except BufferUnavailable:
            log.warning("buffer unavailable; reading the log", exc_info=True)
            window = None
        if (
            window
            and window[-1]["seq"] >= session.last_seq
            and window[-1]["seq"] - window[0]["seq"] + 1 == len(window)  # no gaps
            and len(window) >= min(n, session.last_seq)
        ):
            return [MessageOut.model_validate(m) for m in window]
        async with self.db.read() as tx:
            rows = await message_store.page(
                tx,
                tenant_id,
                session.user_id,
                session.id,
                before_seq=None,
                limit=self.config.buffer_window,
            )
        entries = [buffer_entry(r) for r in rows]
        if window is not None:
            try:
                await self.buffer.replace(tenant_id, session.user_id, session.id, entries)
            except BufferUnavailable:
                log.warning("could not rebuild the buffer", exc_info=True)
        return [MessageOut.model_validate(m) for m in entries[-n:]]
