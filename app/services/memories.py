"""Long-term memories written by callers: create, read, update, delete, history.

Order of writes: the row is written inside the transaction, the point is written, then the
transaction commits. If the index is down the transaction rolls back and the caller gets a
503 with nothing stored; a memory is never only in one of the two stores.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from app.core import terms
from app.core.audit import AuditEvent, EventName
from app.core.chunking import heuristic_importance
from app.core.dedupe import content_hash
from app.errors import InvalidInput, MemoryNotFound, SessionNotFound
from app.providers.embeddings import Embedder
from app.schemas.common import Source
from app.schemas.memories import (
    MemoryCreate,
    MemoryEventOut,
    MemoryEventPage,
    MemoryOut,
    MemoryPage,
    MemoryPatch,
)
from app.services.cursors import encode_cursor, one_int, time_and_id
from app.services.ingest import writable
from app.services.reindex import Reindexer
from app.stores import memories as memory_store
from app.stores import sessions as session_store
from app.stores.db import Database
from app.stores.models import Memory, MemoryEvent
from app.stores.vectors import MemoryPayload, VectorIndex, VectorPoint


def memory_out(row: Memory) -> MemoryOut:
    return MemoryOut(
        id=row.id,
        user_id=row.user_id,
        session_id=row.session_id,
        memory_type=row.memory_type,
        content=row.content,
        importance=row.importance,
        pinned=row.pinned,
        access_count=row.access_count,
        last_accessed_at=row.last_accessed_at,
        strength=row.strength,
        sources=[Source.model_validate(s) for s in row.sources],
        metadata=row.metadata_,
        created_at=row.created_at,
        updated_at=row.updated_at,
        valid_from=row.valid_from,
        valid_to=row.valid_to,
        superseded_by=row.superseded_by,
    )


def event_out(row: MemoryEvent) -> MemoryEventOut:
    return MemoryEventOut(
        id=row.id,
        memory_id=row.memory_id,
        event=row.event,
        old=row.old_value,
        new=row.new_value,
        reason=row.reason,
        created_at=row.created_at,
    )


def _event(
    row: Memory,
    event: EventName,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    reason: str,
) -> AuditEvent:
    return AuditEvent(
        row.tenant_id,
        row.user_id,
        row.id,
        event,
        old=old,
        new=new,
        reason=reason,
        at=datetime.now(UTC),
    )


_ATTRIBUTE = {"metadata": "metadata_"}  # a patch's field name -> the row's attribute


def _changes(new: dict[str, Any], now: datetime) -> memory_store.MemoryChanges:
    """What a patch writes: the fields it changes, the content's hash, the time."""
    changes: memory_store.MemoryChanges = {"updated_at": now}
    if "content" in new:
        changes["content"] = new["content"]
        changes["content_hash"] = content_hash(new["content"])
    if "memory_type" in new:
        changes["memory_type"] = new["memory_type"]
    if "importance" in new:
        changes["importance"] = new["importance"]
    if "pinned" in new:
        changes["pinned"] = new["pinned"]
    if "metadata" in new:
        changes["metadata_"] = new["metadata"]
    return changes


class MemoryService:
    def __init__(
        self, db: Database, vectors: VectorIndex, embedder: Embedder, reindexer: Reindexer
    ) -> None:
        self.db = db
        self.vectors = vectors
        self.embedder = embedder
        self.reindexer = reindexer

    async def create(self, tenant_id: str, body: MemoryCreate) -> MemoryOut:
        now = datetime.now(UTC)
        dense = (await self.embedder.embed([body.content]))[0]
        values: memory_store.MemoryValues = {
            "id": uuid.uuid4(),
            "tenant_id": tenant_id,
            "user_id": body.user_id,
            "session_id": body.session_id,
            "memory_type": body.memory_type,
            "content": body.content,
            "importance": body.importance
            if body.importance is not None
            else heuristic_importance(body.content),
            "access_count": 0,
            "last_accessed_at": None,
            "strength": 1.0,
            "pinned": body.pinned,
            "valid_from": now,
            "sources": [],
            "metadata_": body.metadata,
            "content_hash": content_hash(body.content),
            "created_at": now,
            "updated_at": now,
        }
        async with self.db.transaction() as tx:
            if body.session_id is not None:
                session = await session_store.get(tx, tenant_id, body.user_id, body.session_id)
                if session is None:
                    raise SessionNotFound(body.session_id)
            await writable(tx, tenant_id, body.user_id, now)
            row = await memory_store.insert(tx, values)
            await memory_store.add_events(
                tx, [_event(row, "created", None, {"content": row.content}, "created by API")]
            )
            point = VectorPoint(
                row.id, dense, terms.document_vector(row.content), MemoryPayload.from_row(row)
            )
            await self.vectors.upsert([point])
        return memory_out(row)

    async def get(self, tenant_id: str, user_id: str, memory_id: uuid.UUID) -> MemoryOut:
        async with self.db.read() as tx:
            row = await memory_store.get(tx, tenant_id, user_id, memory_id)
        if row is None:
            raise MemoryNotFound(memory_id)
        return memory_out(row)

    async def list(
        self,
        tenant_id: str,
        user_id: str,
        memory_type: str | None,
        cursor: str | None,
        limit: int,
    ) -> MemoryPage:
        after = time_and_id(cursor)
        async with self.db.read() as tx:
            rows = await memory_store.page(
                tx, tenant_id, user_id, memory_type=memory_type, after=after, limit=limit + 1
            )
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = (
            encode_cursor(rows[-1].created_at.isoformat(), str(rows[-1].id)) if more else None
        )
        return MemoryPage(items=[memory_out(r) for r in rows], next_cursor=next_cursor)

    async def update(self, tenant_id: str, memory_id: uuid.UUID, body: MemoryPatch) -> MemoryOut:
        fields = body.model_fields_set - {"user_id", "reason"}
        for name in fields:
            if getattr(body, name) is None:
                raise InvalidInput(name, "may be omitted but not null")
        now = datetime.now(UTC)
        dense: list[float] | None = None
        if body.content is not None:
            dense = (await self.embedder.embed([body.content]))[0]
        async with self.db.transaction() as tx:
            row = await memory_store.get(tx, tenant_id, body.user_id, memory_id)
            if row is None:
                raise MemoryNotFound(memory_id)
            old: dict[str, Any] = {}
            new: dict[str, Any] = {}
            for name in sorted(fields):
                before, after = getattr(row, _ATTRIBUTE.get(name, name)), getattr(body, name)
                if before != after:
                    old[name], new[name] = before, after
            if not new:
                return memory_out(row)
            row = await memory_store.update_fields(
                tx, tenant_id, body.user_id, row.id, _changes(new, now)
            )
            await memory_store.add_events(
                tx, [_event(row, "updated", old, new, body.reason or "updated by API")]
            )
            if dense is not None:
                point = VectorPoint(
                    row.id, dense, terms.document_vector(row.content), MemoryPayload.from_row(row)
                )
                await self.vectors.upsert([point])
            else:
                patch = MemoryPayload.from_row(row).as_patch()
                await self.vectors.set_payload([(row.id, patch)], owner=(tenant_id, body.user_id))
        return memory_out(row)

    async def delete(self, tenant_id: str, user_id: str, memory_id: uuid.UUID) -> None:
        """Soft delete: the row stays for the audit trail, the point leaves the index, and
        the memories whose index context carried its words are rebuilt without them."""
        now = datetime.now(UTC)
        async with self.db.transaction() as tx:
            row = await memory_store.get(tx, tenant_id, user_id, memory_id)
            if row is None:
                raise MemoryNotFound(memory_id)
            await memory_store.soft_delete(tx, tenant_id, user_id, row.id, now)
            await memory_store.add_events(
                tx, [_event(row, "deleted", {"content": row.content}, None, "deleted by API")]
            )
            await self.vectors.delete([row.id])
        # Its words also live in the index context of the turns after it: rebuild those.
        await self.reindexer.rebuild_followers(row)

    async def history(
        self, tenant_id: str, user_id: str, memory_id: uuid.UUID, cursor: str | None, limit: int
    ) -> MemoryEventPage:
        after_id = one_int(cursor)
        async with self.db.read() as tx:
            if not await memory_store.exists_any(tx, tenant_id, user_id, memory_id):
                raise MemoryNotFound(memory_id)
            rows = await memory_store.events_page(
                tx, tenant_id, memory_id, after_id=after_id, limit=limit + 1
            )
        more = len(rows) > limit
        rows = rows[:limit]
        return MemoryEventPage(
            items=[event_out(r) for r in rows],
            next_cursor=encode_cursor(rows[-1].id) if more else None,
        )
