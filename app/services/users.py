"""A user's data as a whole: export it as one streamed JSON document, erase it with a
durable job (docs/privacy.md).

Export reads the stores in keyset pages, each in a short transaction of its own, and writes
the document as it goes: its memory does not grow with the user. It is not a snapshot:
a write that lands while it runs may or may not be in it.

Erasure marks the user first (ingest is refused from then on), then a job deletes in
batches, each batch's rows and its counts committing together, so that a run after a crash
resumes where the last one stopped and the receipt's SQL counts are exact. The order:
sessions (locked, so a worker promoting one finds it gone), the index, memories with
their audit trail, summaries, jobs, the index again (anything written while the rest
went), and last the user row, in the transaction that records the receipt.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import BaseModel

from app.errors import Unavailable, UserNotFound
from app.schemas.users import ERASED, ErasureCounts, ErasureReceipt, PurgedFromDisk
from app.services.job_kinds import JobContext, JobKind
from app.stores import jobs as job_store
from app.stores import users as user_store
from app.stores.buffer import Buffer
from app.stores.db import Database
from app.stores.models import Job, Session, Summary, User
from app.stores.purged import Purged
from app.stores.users import Row
from app.stores.vectors import VectorIndex

ERASE_USER = "erase_user"


class EraseUser(BaseModel):
    """The `erase_user` job's payload (its row also keeps the receipt, once written)."""

    user_id: str


EXPORT_FORMAT = 1
BLOCK = 64 * 1024

Chunks = AsyncIterator[bytes]


@dataclass(frozen=True, slots=True)
class ExportSection:
    """One top-level key of the export: `write(tenant_id, user_id)` yields its JSON value
    in pieces. A feature that holds data about users adds its section to the list that
    `build_export` is given (app/wiring.py)."""

    name: str
    write: Callable[[str, str], Chunks]


def _dumps(value: Any) -> bytes:
    # `default=str`: asyncpg hands back UUIDs of its own type, which orjson does not know.
    return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)


async def _array(items: AsyncIterator[Any]) -> Chunks:
    """A JSON array of the items (each a JSON-able value, or bytes already encoded)."""
    yield b"["
    first = True
    async for item in items:
        if not first:
            yield b","
        first = False
        yield item if isinstance(item, bytes) else _dumps(item)
    yield b"]"


def _message(row: Row) -> dict[str, Any]:
    return {
        "seq": row.seq,
        "id": row.client_id,
        "role": row.role,
        "content": row.content,
        "created_at": row.created_at,
        "received_at": row.received_at,
        "metadata": row.metadata,
    }


def _event(row: Row) -> dict[str, Any]:
    return {
        "id": row.id,
        "event": row.event,
        "old": row.old_value,
        "new": row.new_value,
        "reason": row.reason,
        "created_at": row.created_at,
    }


def _memory(row: Row, history: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": row.id,
        "session_id": row.session_id,
        "memory_type": row.memory_type,
        "content": row.content,
        "importance": row.importance,
        "pinned": row.pinned,
        "access_count": row.access_count,
        "last_accessed_at": row.last_accessed_at,
        "strength": row.strength,
        "valid_from": row.valid_from,
        "valid_to": row.valid_to,
        "superseded_by": row.superseded_by,
        "sources": row.sources,
        "metadata": row.metadata,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "deleted_at": row.deleted_at,
        "history": history,
    }


def _summary(row: Summary) -> dict[str, Any]:
    return {
        "id": row.id,
        "level": row.level,
        "period_start": row.period_start,
        "period_end": row.period_end,
        "timezone": row.timezone,
        "content": row.content,
        "sources": row.sources,
        "method": row.method,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def _job(row: Job) -> dict[str, Any]:
    return {
        "id": row.id,
        "kind": row.kind,
        "state": row.state,
        "payload": row.payload,
        "result": row.result,
        "created_at": row.created_at,
        "finished_at": row.finished_at,
    }


def _session_head(row: Session) -> dict[str, Any]:
    return {
        "id": row.id,
        "system_prompt": row.system_prompt,
        "metadata": row.metadata_,
        "last_seq": row.last_seq,
        "indexed_seq": row.indexed_seq,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


class UserSections:
    """The sections of the stores this release has: the user row, sessions with their
    logs, the Redis buffer, memories with their history, summaries and jobs."""

    def __init__(self, db: Database, buffer: Buffer, *, page: int = 500) -> None:
        self.db = db
        self.buffer = buffer
        self.page = page

    def all(self) -> list[ExportSection]:
        return [
            ExportSection("user", self.user),
            ExportSection("sessions", self.sessions),
            ExportSection("buffer", self.buffers),
            ExportSection("memories", self.memories),
            ExportSection("summaries", self.summaries),
            ExportSection("graph", self.graph),
            ExportSection("jobs", self.jobs),
        ]

    async def user(self, tenant_id: str, user_id: str) -> Chunks:
        async with self.db.read() as tx:
            row = await user_store.get(tx, tenant_id, user_id)
        if row is None:
            yield b"null"
            return
        yield _dumps({"id": row.id, "profile": row.profile, "created_at": row.created_at})

    async def _each_session(self, tenant_id: str, user_id: str) -> AsyncIterator[Session]:
        after: str | None = None
        while True:
            async with self.db.read() as tx:
                rows = await user_store.sessions_page(
                    tx, tenant_id, user_id, after=after, limit=self.page
                )
            for row in rows:
                yield row
            if len(rows) < self.page:
                return
            after = rows[-1].id

    async def _messages(
        self, tenant_id: str, user_id: str, session_id: str
    ) -> AsyncIterator[dict[str, Any]]:
        after = 0
        while True:
            async with self.db.read() as tx:
                rows = await user_store.messages_page(
                    tx, tenant_id, user_id, session_id, after_seq=after, limit=self.page
                )
            for row in rows:
                yield _message(row)
            if len(rows) < self.page:
                return
            after = rows[-1].seq

    async def sessions(self, tenant_id: str, user_id: str) -> Chunks:
        yield b"["
        first = True
        async for row in self._each_session(tenant_id, user_id):
            # The head's closing brace gives way to the streamed `messages` array.
            yield (b"" if first else b",") + _dumps(_session_head(row))[:-1] + b',"messages":'
            first = False
            async for chunk in _array(self._messages(tenant_id, user_id, row.id)):
                yield chunk
            yield b"}"
        yield b"]"

    async def buffers(self, tenant_id: str, user_id: str) -> Chunks:
        async def each() -> AsyncIterator[dict[str, Any]]:
            async for row in self._each_session(tenant_id, user_id):
                window, pad = await self.buffer.snapshot(tenant_id, user_id, row.id)
                if not window and pad is None:
                    continue
                yield {
                    "session_id": row.id,
                    "window": [orjson.loads(item) for item in window],
                    "scratchpad": orjson.loads(pad) if pad is not None else None,
                }

        async for chunk in _array(each()):
            yield chunk

    async def memories(self, tenant_id: str, user_id: str) -> Chunks:
        async def each() -> AsyncIterator[dict[str, Any]]:
            after: tuple[datetime, uuid.UUID] | None = None
            while True:
                async with self.db.read() as tx:
                    rows = await user_store.memories_page(
                        tx, tenant_id, user_id, after=after, limit=self.page
                    )
                    events = await user_store.events_of(tx, tenant_id, [r.id for r in rows])
                history: dict[uuid.UUID, list[dict[str, Any]]] = {}
                for e in events:
                    history.setdefault(e.memory_id, []).append(_event(e))
                for row in rows:
                    yield _memory(row, history.get(row.id, []))
                if len(rows) < self.page:
                    return
                after = (rows[-1].created_at, rows[-1].id)

        async for chunk in _array(each()):
            yield chunk

    async def summaries(self, tenant_id: str, user_id: str) -> Chunks:
        async def each() -> AsyncIterator[dict[str, Any]]:
            after: uuid.UUID | None = None
            while True:
                async with self.db.read() as tx:
                    rows = await user_store.summaries_page(
                        tx, tenant_id, user_id, after=after, limit=self.page
                    )
                for row in rows:
                    yield _summary(row)
                if len(rows) < self.page:
                    return
                after = rows[-1].id

        async for chunk in _array(each()):
            yield chunk

    async def graph(self, tenant_id: str, user_id: str) -> Chunks:
        """`{"entities": [...], "relations": [...]}`, each paged by id."""

        async def each(page: Any, shape: Callable[[Any], dict[str, Any]]) -> AsyncIterator[Any]:
            after: uuid.UUID | None = None
            while True:
                async with self.db.read() as tx:
                    rows = await page(tx, tenant_id, user_id, after=after, limit=self.page)
                for row in rows:
                    yield shape(row)
                if len(rows) < self.page:
                    return
                after = rows[-1].id

        yield b'{"entities":'
        async for chunk in _array(each(user_store.entities_page, _entity)):
            yield chunk
        yield b',"relations":'
        async for chunk in _array(each(user_store.relations_page, _relation)):
            yield chunk
        yield b"}"

    async def jobs(self, tenant_id: str, user_id: str) -> Chunks:
        async def each() -> AsyncIterator[dict[str, Any]]:
            after: uuid.UUID | None = None
            while True:
                async with self.db.read() as tx:
                    rows = await user_store.jobs_page(
                        tx, tenant_id, user_id, after=after, limit=self.page
                    )
                for row in rows:
                    yield _job(row)
                if len(rows) < self.page:
                    return
                after = rows[-1].id

        async for chunk in _array(each()):
            yield chunk


class ExportService:
    def __init__(self, db: Database, sections: Sequence[ExportSection]) -> None:
        names = [s.name for s in sections]
        if len(set(names)) != len(names) or {"format", "user_id", "sections"} & set(names):
            raise ValueError(f"export sections must have distinct, free names: {names}")
        self.db = db
        self.sections = list(sections)

    async def open(self, tenant_id: str, user_id: str) -> Chunks:
        """The document's chunks; `UserNotFound` (before any chunk) for a user never seen,
        erased, or being erased."""
        async with self.db.read() as tx:
            user = await user_store.get(tx, tenant_id, user_id)
        if user is None or user.erasure is not None:
            raise UserNotFound(user_id)
        return self._document(tenant_id, user_id)

    async def _document(self, tenant_id: str, user_id: str) -> Chunks:
        """The sections' pieces, gathered into blocks of about `BLOCK` bytes: one send
        per block, not one per message."""
        block: list[bytes] = []
        size = 0
        async for piece in self._pieces(tenant_id, user_id):
            block.append(piece)
            size += len(piece)
            if size >= BLOCK:
                yield b"".join(block)
                block, size = [], 0
        if block:
            yield b"".join(block)

    async def _pieces(self, tenant_id: str, user_id: str) -> Chunks:
        head = {
            "format": EXPORT_FORMAT,
            "user_id": user_id,
            "exported_at": datetime.now(UTC),
            "sections": [s.name for s in self.sections],
        }
        yield _dumps(head)[:-1]
        for section in self.sections:
            yield b"," + _dumps(section.name) + b":"
            async for chunk in section.write(tenant_id, user_id):
                yield chunk
        yield b"}"


def _receipt(
    user_id: str,
    job: Job | None,
    counts: dict[str, Any] | None,
    purged: dict[str, Any] | None = None,
) -> ErasureReceipt:
    values = {name: int((counts or {}).get(name, 0)) for name in ERASED}
    return ErasureReceipt(
        user_id=user_id,
        job_id=job.id if job is not None else None,
        state=job.state if job is not None else "succeeded",
        counts=ErasureCounts(**values),
        finished_at=job.finished_at if job is not None else datetime.now(UTC),
        purged_from_disk=PurgedFromDisk(**(purged or {})),
    )


class ErasureService:
    """Starts erasures (the API) and runs them (the `erase_user` job)."""

    def __init__(
        self,
        db: Database,
        buffer: Buffer,
        vectors: VectorIndex,
        *,
        max_attempts: int,
        wait_seconds: float,
        batch: int = 500,
        buffer_on_disk: bool = True,
        purge_database: bool = True,
        purge_lock_timeout_seconds: float = 1.0,
        purge_wait_seconds: float = 60.0,
    ) -> None:
        """`buffer_on_disk`: the buffer is a Redis server, whose snapshot files may hold
        deleted keys (False for the embedded stand-in, which writes no file).
        `purge_database`: purge the database's files after each erasure (`Database.purge`;
        `STRATA_ERASURE_PURGE_DATABASE`); `purge_wait_seconds`: how long a purge waits,
        per attempt, for a lock, an older transaction or a Redis rewrite."""
        self.db = db
        self.buffer_on_disk = buffer_on_disk
        self.purge_database = purge_database
        self.purge_lock_timeout_seconds = purge_lock_timeout_seconds
        self.purge_wait_seconds = purge_wait_seconds
        self.buffer = buffer
        self.vectors = vectors
        self.max_attempts = max_attempts
        self.wait_seconds = wait_seconds
        self.batch = batch

    # The request.

    async def request(self, tenant_id: str, user_id: str, *, wait: bool) -> ErasureReceipt:
        """Mark the user and queue the job (or find the one already running); with `wait`,
        poll until it ends or `wait_seconds` pass. A user of whom nothing is held (never
        seen, or erased already) gets a finished receipt of zeros: erasure is idempotent."""
        now = datetime.now(UTC)
        async with self.db.transaction() as tx:
            user = await user_store.get(tx, tenant_id, user_id, for_update=True)
            if user is None:
                return _receipt(user_id, None, None)
            job = await self._job_of(tx, user, now)
        if wait:
            job = await self._wait(tenant_id, job)
        if job.state == "succeeded":
            result = job.result or {}
            return _receipt(user_id, job, result.get("counts"), result.get("purged_from_disk"))
        return _receipt(user_id, job, await self._progress(tenant_id, user_id))

    async def _job_of(self, tx: Any, user: User, now: datetime) -> Job:
        if user.erasure is not None:
            job = await job_store.get(tx, user.tenant_id, uuid.UUID(user.erasure["job_id"]))
            if job is not None:
                if job.state == "failed":  # gave up earlier: asked again, try again
                    job = await job_store.rerun(
                        tx, tenant_id=user.tenant_id, job_id=job.id, now=now
                    )
                if job is not None:
                    return job
        # One job per incarnation of the user: a user erased, then seen again, then erased
        # again gets a second job (and keeps the first one's receipt).
        job, _ = await job_store.enqueue(
            tx,
            tenant_id=user.tenant_id,
            kind=ERASE_USER,
            key=f"{user.id}@{user.created_at.isoformat()}",
            payload=EraseUser(user_id=user.id).model_dump(mode="json"),
            due_at=now,
            max_attempts=self.max_attempts,
            now=now,
        )
        # Counts of an earlier job whose row is gone (purged by hand) carry over.
        counts = (user.erasure or {}).get("counts") or {}
        erasure = {"job_id": str(job.id), "started_at": now.isoformat(), "counts": counts}
        await user_store.set_erasure(tx, user.tenant_id, user.id, erasure)
        return job

    async def _wait(self, tenant_id: str, job: Job) -> Job:
        deadline = time.monotonic() + self.wait_seconds
        delay = 0.01
        while job.state in ("queued", "running") and time.monotonic() < deadline:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.2)
            async with self.db.read() as tx:
                current = await job_store.get(tx, tenant_id, job.id)
            if current is None:
                break
            job = current
        return job

    async def _progress(self, tenant_id: str, user_id: str) -> dict[str, Any] | None:
        async with self.db.read() as tx:
            user = await user_store.get(tx, tenant_id, user_id)
        return (user.erasure or {}).get("counts") if user is not None else None

    # The job.

    def job(self) -> JobKind[EraseUser]:
        """`erase_user`: keyed by the user and the user row's creation time, so asking
        twice queues one job; a run resumes where a crashed one stopped and answers the
        receipt again once done."""
        return JobKind(ERASE_USER, EraseUser, self._erase_job)

    async def _erase_job(self, ctx: JobContext, payload: EraseUser) -> dict[str, Any]:
        last = ctx.attempt >= ctx.max_attempts
        return await self.run(ctx.tenant_id, payload.user_id, ctx.job_id, last_attempt=last)

    async def run(
        self, tenant_id: str, user_id: str, job_id: uuid.UUID, *, last_attempt: bool = False
    ) -> dict[str, Any]:
        """Erase what is left of the user; the receipt. Idempotent: a run after a crash
        goes on where the last stopped; a run after the end finds the receipt. On the
        `last_attempt`, a purge that cannot finish (a long transaction, a backup holding
        its snapshot) no longer fails the job: the receipt says so instead."""
        async with self.db.read() as tx:
            user = await user_store.get(tx, tenant_id, user_id)
            job = await job_store.get(tx, tenant_id, job_id)
        if user is None or (user.erasure or {}).get("job_id") != str(job_id):
            # Done already (the crash came after the last commit), or not ours to do.
            receipt: dict[str, Any] = dict((job.payload if job else {}).get("receipt") or {})
            if receipt and user is None:  # the crash may have come before Redis was done
                await self.buffer.drop_user(tenant_id, user_id)
            if receipt:  # the crash may have come before the files were purged: again
                receipt = await self._purge_disk(tenant_id, job_id, receipt, last_attempt)
            return receipt or {"user_id": user_id, "counts": dict.fromkeys(ERASED, 0)}
        while await self._sessions_batch(tenant_id, user_id):
            await self.after_batch("sessions")
        await self._index(tenant_id, user_id)
        while await self._memories_batch(tenant_id, user_id):
            await self.after_batch("memories")
        while await self._step(tenant_id, user_id, self._summaries_batch):
            await self.after_batch("summaries")
        while await self._step(tenant_id, user_id, self._graph_batch):
            await self.after_batch("graph")
        await self._step(tenant_id, user_id, self._jobs)
        await self._index(tenant_id, user_id)  # points written while the rest went
        index = await self.vectors.purge()
        receipt = await self._finish(tenant_id, user_id, job_id, index_purged=index)
        # Every Redis key still naming them: the change mark the last commits wrote
        # (app/stores/generations.py), a window rebuilt meanwhile. Not counted: the receipt
        # is written; a failure here retries the job, which comes back for this.
        await self.buffer.drop_user(tenant_id, user_id)
        return await self._purge_disk(tenant_id, job_id, receipt, last_attempt)

    async def _purge_disk(
        self, tenant_id: str, job_id: uuid.UUID, receipt: dict[str, Any], last_attempt: bool
    ) -> dict[str, Any]:
        """The database's files purged of the deleted rows, the user row and the older
        copies of the receipt's row included (`Database.purge`), and Redis's
        (`Buffer.purge`); the receipt rewritten with what each achieved when it differs
        from what `_finish` wrote (the job row holds ids and counts only). The job succeeds
        only once this is done, so the receipt's `purged_from_disk` holds when it is read."""
        purged = dict(receipt.get("purged_from_disk") or {})
        notes = dict(purged.pop("notes", None) or {})
        outcomes = {"database": await _settled(self._purge_database(), last_attempt)}
        if self.buffer_on_disk:
            outcomes["buffer"] = await _settled(
                self.buffer.purge(self.purge_wait_seconds), last_attempt
            )
        for store, outcome in outcomes.items():
            purged[store] = outcome.done
            notes.pop(store, None)
            if outcome.reason:
                notes[store] = outcome.reason
        if notes:
            purged["notes"] = notes
        if purged == receipt.get("purged_from_disk"):
            return receipt
        receipt = {**receipt, "purged_from_disk": purged}
        async with self.db.transaction() as tx:
            await user_store.record_receipt(tx, tenant_id, job_id, receipt)
        return receipt

    async def _purge_database(self) -> Purged:
        if not self.purge_database:
            return Purged(False, "the purge is turned off (STRATA_ERASURE_PURGE_DATABASE)")
        return await self.db.purge(
            user_store.ERASED_TABLES,
            lock_timeout_seconds=self.purge_lock_timeout_seconds,
            wait_seconds=self.purge_wait_seconds,
        )

    async def after_batch(self, step: str) -> None:
        """Called between batches; a test slows the erasure here to kill it half-way."""

    async def _sessions_batch(self, tenant_id: str, user_id: str) -> bool:
        async with self.db.transaction() as tx:
            ids = await user_store.lock_sessions(tx, tenant_id, user_id, self.batch)
            if not ids:
                return False
            # Redis first: if it is down the batch rolls back and the job retries.
            keys = await self.buffer.drop_sessions(tenant_id, user_id, ids)
            messages, sessions = await user_store.delete_sessions(tx, tenant_id, user_id, ids)
            await user_store.add_erased(
                tx,
                tenant_id,
                user_id,
                {"sessions": sessions, "messages": messages, "buffer_keys": keys},
            )
        # Again after the commit: a context call may have rebuilt a window meanwhile.
        if late := await self.buffer.drop_sessions(tenant_id, user_id, ids):
            async with self.db.transaction() as tx:
                await user_store.add_erased(tx, tenant_id, user_id, {"buffer_keys": late})
        return True

    async def _index(self, tenant_id: str, user_id: str) -> None:
        points = await self.vectors.delete_user(tenant_id, user_id)
        if points:
            async with self.db.transaction() as tx:
                await user_store.add_erased(tx, tenant_id, user_id, {"index_points": points})

    async def _memories_batch(self, tenant_id: str, user_id: str) -> bool:
        async with self.db.transaction() as tx:
            memories, events, ids = await user_store.delete_memories(
                tx, tenant_id, user_id, self.batch
            )
            if not ids:
                events += await user_store.delete_stray_events(tx, tenant_id, user_id)
            counts = {"memories": memories, "memory_events": events}
            await user_store.add_erased(tx, tenant_id, user_id, counts)
        # A point of one of them written since the index pass goes in the last pass.
        return bool(ids)

    async def _step(
        self, tenant_id: str, user_id: str, batch: Callable[[Any, str, str], Any]
    ) -> bool:
        async with self.db.transaction() as tx:
            counts: dict[str, int] = await batch(tx, tenant_id, user_id)
            await user_store.add_erased(tx, tenant_id, user_id, counts)
        return any(counts.values())

    async def _summaries_batch(self, tx: Any, tenant_id: str, user_id: str) -> dict[str, int]:
        return {"summaries": await user_store.delete_summaries(tx, tenant_id, user_id, self.batch)}

    async def _graph_batch(self, tx: Any, tenant_id: str, user_id: str) -> dict[str, int]:
        relations, entities = await user_store.delete_graph(tx, tenant_id, user_id, self.batch)
        return {"relations": relations, "entities": entities}

    @staticmethod
    async def _jobs(tx: Any, tenant_id: str, user_id: str) -> dict[str, int]:
        return {"jobs": await user_store.delete_jobs(tx, tenant_id, user_id, keep_kind=ERASE_USER)}

    async def _finish(
        self, tenant_id: str, user_id: str, job_id: uuid.UUID, *, index_purged: bool
    ) -> dict[str, Any]:
        async with self.db.transaction() as tx:
            user = await user_store.get(tx, tenant_id, user_id, for_update=True)
            counts = dict((user.erasure or {}).get("counts") or {}) if user else {}
            sealed = await user_store.index_text_sealed(tx, tenant_id, user_id)
            receipt = {
                "user_id": user_id,
                "counts": {name: int(counts.get(name, 0)) for name in ERASED},
                "erased_at": datetime.now(UTC).isoformat(),
                "purged_from_disk": {
                    "database": self.db.purges_from_disk,
                    "index": index_purged,
                    # Their key goes with the row below (`user_store.delete`).
                    "index_text": index_purged or sealed,
                    "buffer": not self.buffer_on_disk,
                },
            }
            await user_store.record_receipt(tx, tenant_id, job_id, receipt)
            await user_store.delete(tx, tenant_id, user_id)
        return receipt


async def _settled(purge: Awaitable[Purged], last_attempt: bool) -> Purged:
    """A purge's outcome; one that could not finish in time fails the attempt (the job
    retries later), except the last, which it leaves with the reason in the receipt: the
    rows are deleted, and the next erasure's purge takes their bytes with it."""
    try:
        return await purge
    except Unavailable as exc:
        if not last_attempt:
            raise
        return Purged(False, f"not done in the job's attempts: {exc.detail}")


def _entity(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "type": row.entity_type,
        "learned_at": row.learned_at,
        "updated_at": row.updated_at,
    }


def _relation(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "subject_id": row.subject_id,
        "predicate": row.predicate,
        "object_id": row.object_id,
        "valid_from": row.valid_from,
        "valid_to": row.valid_to,
        "learned_at": row.learned_at,
        "retracted_at": row.retracted_at,
        "memory_id": row.memory_id,
        "sources": row.sources,
    }
