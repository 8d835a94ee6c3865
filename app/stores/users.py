"""Queries on everything held about one user: the profile's attributes, and export and
erasure (docs/privacy.md).

Reads are keyset pages (a user of any size is read in constant memory); deletes take a
bounded batch at a time, so an erasure is a sequence of short transactions that a crash
can interrupt and a re-run resumes.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.stores import user_keys
from app.stores.models import (
    Entity,
    Job,
    Memory,
    MemoryEvent,
    Message,
    Relation,
    Session,
    Summary,
    User,
    UserKey,
)
from app.stores.one_hop import Prepared
from app.stores.sessions import ensure_user

Row = sa.Row[Any]  # a plain row, columns by their SQL names (`metadata`, not `metadata_`)

# Every table an erasure deletes rows from: PostgreSQL rewrites them after it
# (`Database.purge`, docs/privacy.md "What stays on disk"). A table holding user data
# that the erasure empties belongs here.
ERASED_TABLES = tuple(
    model.__tablename__
    for model in (
        Message,
        Session,
        Memory,
        MemoryEvent,
        Summary,
        Relation,
        Entity,
        Job,
        User,
        UserKey,
    )
)


def _delete(model: Any) -> Any:
    """A bulk DELETE that leaves the session's identity map alone (nothing here holds
    the rows it deletes): no per-row bookkeeping."""
    return sa.delete(model).execution_options(synchronize_session=False)


async def get(
    tx: AsyncSession, tenant_id: str, user_id: str, *, for_update: bool = False
) -> User | None:
    stmt = sa.select(User).where(User.tenant_id == tenant_id, User.id == user_id)
    if for_update:
        stmt = stmt.with_for_update()
    return (await tx.execute(stmt.execution_options(populate_existing=True))).scalar_one_or_none()


# Built once (every ingest runs it): building a statement costs more CPU than running it.
_ERASURE_FOR_SHARE = (
    sa.select(User.erasure)
    .where(User.tenant_id == sa.bindparam("p_tenant"), User.id == sa.bindparam("p_user"))
    .with_for_update(read=True)
)


async def ensure_writable(
    tx: AsyncSession, tenant_id: str, user_id: str, now: datetime
) -> dict[str, Any] | None:
    """Create the user if new; the erasure in progress, if any (then nothing may be written).

    The row is read FOR SHARE: an erasure marks the row FOR UPDATE, so a write either
    commits before the mark (and the erasure, which starts after it, removes it) or reads
    the mark and is refused. SQLite serialises writers and needs no lock. A known user (the
    common case) costs one statement: the insert runs only when the read finds no row.
    """
    params = {"p_tenant": tenant_id, "p_user": user_id}
    row = (await tx.execute(_ERASURE_FOR_SHARE, params)).first()
    if row is None:
        await ensure_user(tx, tenant_id, user_id, now)
        row = (await tx.execute(_ERASURE_FOR_SHARE, params)).first()
    erasure: dict[str, Any] | None = row.erasure if row is not None else None
    return erasure


_ERASURE_ONE_HOP = Prepared(_ERASURE_FOR_SHARE)


def known_and_writable_in(conn: sqlite3.Connection, tenant_id: str, user_id: str) -> bool:
    """On the one-hop writer's connection (`Database.write_in_one`): whether the user
    exists and no erasure of theirs runs (`ensure_writable` creates the one, refuses the
    other). SQLite serialises writers: no lock to take."""
    values = {"p_tenant": tenant_id, "p_user": user_id}
    row = _ERASURE_ONE_HOP.run(conn, values).fetchone()
    return row is not None and row[0] is None


async def live_for_write(tx: AsyncSession, tenant_id: str, user_id: str) -> bool:
    """Whether the user exists and is not being erased, read FOR SHARE (as
    `ensure_writable`, without creating the user): for writers other than ingest."""
    stmt = (
        sa.select(User.erasure)
        .where(User.tenant_id == tenant_id, User.id == user_id)
        .with_for_update(read=True)
    )
    row = (await tx.execute(stmt)).first()
    return row is not None and row.erasure is None


async def set_erasure(
    tx: AsyncSession, tenant_id: str, user_id: str, erasure: dict[str, Any]
) -> None:
    await tx.execute(
        sa.update(User)
        .where(User.tenant_id == tenant_id, User.id == user_id)
        .values(erasure=erasure)
    )


async def add_erased(
    tx: AsyncSession, tenant_id: str, user_id: str, counts: dict[str, int]
) -> dict[str, Any] | None:
    """Add `counts` to the erasure's running counts, in the caller's transaction: the
    rows a batch deleted and its counts commit together."""
    user = await get(tx, tenant_id, user_id, for_update=True)
    if user is None or user.erasure is None:
        return None
    erasure = dict(user.erasure)
    totals = dict(erasure.get("counts", {}))
    for name, n in counts.items():
        totals[name] = int(totals.get(name, 0)) + n
    erasure["counts"] = totals
    await set_erasure(tx, tenant_id, user_id, erasure)
    return erasure


async def delete(tx: AsyncSession, tenant_id: str, user_id: str) -> int:
    """The user row and, with it, their data key (`app.stores.user_keys`): what the
    Qdrant server's files keep of their sealed text no longer opens."""
    await user_keys.delete(tx, tenant_id, user_id)
    result = await tx.execute(_delete(User).where(User.tenant_id == tenant_id, User.id == user_id))
    return int(result.rowcount)  # type: ignore[attr-defined]


async def index_text_sealed(tx: AsyncSession, tenant_id: str, user_id: str) -> bool:
    """Whether every point of the user was written sealed under a key that `delete` will
    destroy (`app.stores.user_keys`)."""
    return await user_keys.sealed_from_start(tx, tenant_id, user_id)


# Sessions and their messages.


async def sessions_page(
    tx: AsyncSession, tenant_id: str, user_id: str, *, after: str | None, limit: int
) -> list[Session]:
    stmt = sa.select(Session).where(Session.tenant_id == tenant_id, Session.user_id == user_id)
    if after is not None:
        stmt = stmt.where(Session.id > after)
    return list((await tx.execute(stmt.order_by(Session.id).limit(limit))).scalars().all())


async def messages_page(
    tx: AsyncSession, tenant_id: str, user_id: str, session_id: str, *, after_seq: int, limit: int
) -> Sequence[Row]:
    """Oldest first, from after `after_seq`; plain rows (columns by their SQL names), not
    ORM objects: an export reads every row once and builds no identity map."""
    table = Message.__table__
    stmt = (
        sa.select(table)
        .where(
            table.c.tenant_id == tenant_id,
            table.c.user_id == user_id,
            table.c.session_id == session_id,
            table.c.seq > after_seq,
        )
        .order_by(table.c.seq)
        .limit(limit)
    )
    return (await tx.execute(stmt)).all()


async def lock_sessions(tx: AsyncSession, tenant_id: str, user_id: str, limit: int) -> list[str]:
    """Up to `limit` of the user's session ids, locked: a worker promoting one of them
    waits, then finds it gone (and removes the points it wrote)."""
    stmt = (
        sa.select(Session.id)
        .where(Session.tenant_id == tenant_id, Session.user_id == user_id)
        .order_by(Session.id)
        .limit(limit)
        .with_for_update()
    )
    return list((await tx.execute(stmt)).scalars().all())


async def delete_sessions(
    tx: AsyncSession, tenant_id: str, user_id: str, session_ids: Sequence[str]
) -> tuple[int, int]:
    """The user's sessions and their logs: (messages, sessions) deleted."""
    if not session_ids:
        return 0, 0
    messages = await tx.execute(
        _delete(Message).where(
            Message.tenant_id == tenant_id,
            Message.user_id == user_id,
            Message.session_id.in_(list(session_ids)),
        )
    )
    sessions = await tx.execute(
        _delete(Session).where(
            Session.tenant_id == tenant_id,
            Session.user_id == user_id,
            Session.id.in_(list(session_ids)),
        )
    )
    return int(messages.rowcount), int(sessions.rowcount)  # type: ignore[attr-defined]


# Memories (live and soft-deleted) and their audit events.


async def memories_page(
    tx: AsyncSession,
    tenant_id: str,
    user_id: str,
    *,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
) -> Sequence[Row]:
    """Every memory of the user, soft-deleted ones too, oldest first: keyset pages on
    (created_at, id), along the (tenant_id, user_id, created_at) index. Plain rows."""
    table = Memory.__table__
    stmt = sa.select(table).where(table.c.tenant_id == tenant_id, table.c.user_id == user_id)
    if after is not None:
        created_at, memory_id = after
        stmt = stmt.where(
            sa.or_(
                table.c.created_at > created_at,
                sa.and_(table.c.created_at == created_at, table.c.id > memory_id),
            )
        )
    stmt = stmt.order_by(table.c.created_at, table.c.id).limit(limit)
    return (await tx.execute(stmt)).all()


async def events_of(
    tx: AsyncSession, tenant_id: str, memory_ids: Sequence[uuid.UUID]
) -> Sequence[Row]:
    """The audit events of these memories, by memory then in order. Plain rows."""
    if not memory_ids:
        return []
    table = MemoryEvent.__table__
    stmt = (
        sa.select(table)
        .where(table.c.tenant_id == tenant_id, table.c.memory_id.in_(list(memory_ids)))
        .order_by(table.c.memory_id, table.c.id)
    )
    return (await tx.execute(stmt)).all()


async def delete_memories(
    tx: AsyncSession, tenant_id: str, user_id: str, limit: int
) -> tuple[int, int, list[uuid.UUID]]:
    """Up to `limit` of the user's memories with their audit events: (memories, events,
    ids) deleted. The events go by memory (their index) and by user (any left over)."""
    # No ORDER BY: any `limit` of them, taken along the user's index without a sort.
    stmt = (
        sa.select(Memory.id)
        .where(Memory.tenant_id == tenant_id, Memory.user_id == user_id)
        .limit(limit)
    )
    ids = list((await tx.execute(stmt)).scalars().all())
    if not ids:
        return 0, 0, []
    events = await tx.execute(
        _delete(MemoryEvent).where(
            MemoryEvent.tenant_id == tenant_id, MemoryEvent.memory_id.in_(ids)
        )
    )
    memories = await tx.execute(
        _delete(Memory).where(Memory.tenant_id == tenant_id, Memory.id.in_(ids))
    )
    return int(memories.rowcount), int(events.rowcount), ids  # type: ignore[attr-defined]


async def delete_stray_events(tx: AsyncSession, tenant_id: str, user_id: str) -> int:
    """Audit events of the user whose memory row is already gone."""
    result = await tx.execute(
        _delete(MemoryEvent).where(
            MemoryEvent.tenant_id == tenant_id, MemoryEvent.user_id == user_id
        )
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


# Summaries.


async def summaries_page(
    tx: AsyncSession, tenant_id: str, user_id: str, *, after: uuid.UUID | None, limit: int
) -> list[Summary]:
    stmt = sa.select(Summary).where(Summary.tenant_id == tenant_id, Summary.user_id == user_id)
    if after is not None:
        stmt = stmt.where(Summary.id > after)
    return list((await tx.execute(stmt.order_by(Summary.id).limit(limit))).scalars().all())


async def delete_summaries(tx: AsyncSession, tenant_id: str, user_id: str, limit: int) -> int:
    ids = (
        (
            await tx.execute(
                sa.select(Summary.id)
                .where(Summary.tenant_id == tenant_id, Summary.user_id == user_id)
                .limit(limit)
            )
        )
        .scalars()
        .all()
    )
    if not ids:
        return 0
    result = await tx.execute(
        _delete(Summary).where(Summary.tenant_id == tenant_id, Summary.id.in_(list(ids)))
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


# The knowledge graph (docs/facts.md): relations first, then the entities they joined.


async def entities_page(
    tx: AsyncSession, tenant_id: str, user_id: str, *, after: uuid.UUID | None, limit: int
) -> list[Entity]:
    stmt = sa.select(Entity).where(Entity.tenant_id == tenant_id, Entity.user_id == user_id)
    if after is not None:
        stmt = stmt.where(Entity.id > after)
    return list((await tx.execute(stmt.order_by(Entity.id).limit(limit))).scalars().all())


async def relations_page(
    tx: AsyncSession, tenant_id: str, user_id: str, *, after: uuid.UUID | None, limit: int
) -> list[Relation]:
    stmt = sa.select(Relation).where(Relation.tenant_id == tenant_id, Relation.user_id == user_id)
    if after is not None:
        stmt = stmt.where(Relation.id > after)
    return list((await tx.execute(stmt.order_by(Relation.id).limit(limit))).scalars().all())


async def delete_graph(
    tx: AsyncSession, tenant_id: str, user_id: str, limit: int
) -> tuple[int, int]:
    """Up to `limit` of the user's relations, and once none are left, of their entities."""
    for model in (Relation, Entity):
        ids = (
            (
                await tx.execute(
                    sa.select(model.id)
                    .where(model.tenant_id == tenant_id, model.user_id == user_id)
                    .limit(limit)
                )
            )
            .scalars()
            .all()
        )
        if ids:
            result = await tx.execute(
                _delete(model).where(model.tenant_id == tenant_id, model.id.in_(list(ids)))
            )
            count = int(result.rowcount)  # type: ignore[attr-defined]
            return (count, 0) if model is Relation else (0, count)
    return 0, 0


# Jobs whose payload names the user.


def _about(tenant_id: str, user_id: str) -> sa.ColumnElement[bool]:
    return sa.and_(Job.tenant_id == tenant_id, Job.payload["user_id"].as_string() == user_id)


async def jobs_page(
    tx: AsyncSession, tenant_id: str, user_id: str, *, after: uuid.UUID | None, limit: int
) -> list[Job]:
    stmt = sa.select(Job).where(_about(tenant_id, user_id))
    if after is not None:
        stmt = stmt.where(Job.id > after)
    return list((await tx.execute(stmt.order_by(Job.id).limit(limit))).scalars().all())


async def delete_jobs(tx: AsyncSession, tenant_id: str, user_id: str, *, keep_kind: str) -> int:
    """The user's jobs, except those of `keep_kind` (the erasure receipts)."""
    result = await tx.execute(_delete(Job).where(_about(tenant_id, user_id), Job.kind != keep_kind))
    return int(result.rowcount)  # type: ignore[attr-defined]


async def record_receipt(
    tx: AsyncSession, tenant_id: str, job_id: uuid.UUID, receipt: dict[str, Any]
) -> None:
    """The receipt in the erasure job's own row, in the transaction that deletes the user:
    a run after a crash there finds it and answers it again."""
    mine = sa.and_(Job.tenant_id == tenant_id, Job.id == job_id)
    job = (await tx.execute(sa.select(Job).where(mine))).scalar_one_or_none()
    if job is None:
        return
    await tx.execute(sa.update(Job).where(mine).values(payload={**job.payload, "receipt": receipt}))


async def profile(tx: AsyncSession, tenant_id: str, user_id: str) -> dict[str, Any] | None:
    """The user's attributes; None for a user Strata has never seen."""
    stmt = sa.select(User.profile).where(User.tenant_id == tenant_id, User.id == user_id)
    row = (await tx.execute(stmt)).first()
    return dict(row[0] or {}) if row is not None else None


async def lock_profile(
    tx: AsyncSession, tenant_id: str, user_id: str, now: datetime
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The user's attributes, locked for a read-modify-write, and the erasure in progress
    if any (then nothing may be written); the user is created if new. One FOR UPDATE
    read: a FOR SHARE look first (`ensure_writable`) would let two patches deadlock."""
    await ensure_user(tx, tenant_id, user_id, now)
    stmt = (
        sa.select(User.profile, User.erasure)
        .where(User.tenant_id == tenant_id, User.id == user_id)
        .with_for_update()
    )
    row = (await tx.execute(stmt)).one()
    return dict(row.profile or {}), row.erasure


async def save_profile(
    tx: AsyncSession, tenant_id: str, user_id: str, attributes: dict[str, Any]
) -> None:
    await tx.execute(
        sa.update(User)
        .where(User.tenant_id == tenant_id, User.id == user_id)
        .values(profile=attributes)
    )


# The tenant's users, for the console (app/console).


async def tenant_users_page(
    tx: AsyncSession, tenant_id: str, *, prefix: str | None, after: str | None, limit: int
) -> list[User]:
    """The tenant's users in id order from after `after`, those whose id starts with
    `prefix` only: one seek on the (tenant_id, id) key."""
    stmt = sa.select(User).where(User.tenant_id == tenant_id)
    if prefix:
        stmt = stmt.where(User.id.startswith(prefix, autoescape=True))
    if after is not None:
        stmt = stmt.where(User.id > after)
    return list((await tx.execute(stmt.order_by(User.id).limit(limit))).scalars().all())
