"""Queries on long-term memories and their audit trail."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.audit import AuditEvent
from app.core.reinforcement import Use
from app.stores.models import Memory, MemoryEvent, User
from app.stores.one_hop import Prepared
from app.stores.sessions import _insert

_CHUNK = 400
# Rows a statement where one write handles many and the event loop waits behind their binds
# (~20-35 us a row, on the loop): a reinforcement flush reaches thousands a second
# (`lock_use`, `save_use`, `add_events`). bench/README.md, "The reinforcement flush in
# slices".
_LOOP_ROWS = 128


async def get(
    tx: AsyncSession, tenant_id: str, user_id: str, memory_id: uuid.UUID
) -> Memory | None:
    stmt = sa.select(Memory).where(
        Memory.id == memory_id,
        Memory.tenant_id == tenant_id,
        Memory.user_id == user_id,
        Memory.deleted_at.is_(None),
    )
    return (await tx.execute(stmt)).scalar_one_or_none()


async def exists_any(tx: AsyncSession, tenant_id: str, user_id: str, memory_id: uuid.UUID) -> bool:
    """True also for a deleted memory: its history stays readable."""
    stmt = sa.select(Memory.id).where(
        Memory.id == memory_id, Memory.tenant_id == tenant_id, Memory.user_id == user_id
    )
    return (await tx.execute(stmt)).first() is not None


async def any_live(tx: AsyncSession) -> bool:
    """Whether any tenant has a memory that is not deleted."""
    stmt = sa.select(sa.literal(1)).where(Memory.deleted_at.is_(None)).limit(1)
    return (await tx.execute(stmt)).first() is not None


async def uses(tx: AsyncSession) -> list[tuple[uuid.UUID, int, datetime | None]]:
    """Every live memory that has been used (`access_count`, `last_accessed_at`): what the
    embedded index reads over its stored payloads (`QdrantEdgeIndex.load_uses`)."""
    stmt = sa.select(Memory.id, Memory.access_count, Memory.last_accessed_at).where(
        Memory.deleted_at.is_(None),
        sa.or_(Memory.access_count > 0, Memory.last_accessed_at.is_not(None)),
    )
    return [(mid, int(count), last) for mid, count, last in (await tx.execute(stmt)).all()]


async def live_page(
    tx: AsyncSession,
    *,
    after: tuple[str, uuid.UUID] | None,
    limit: int,
    tenant_id: str | None = None,
    user_id: str | None = None,
) -> list[Memory]:
    """Live memories of every tenant (or of one, or of one user) in (tenant_id, id) order,
    from after the key `after`: a keyset cursor that rows written or deleted meanwhile
    cannot shift."""
    stmt = sa.select(Memory).where(Memory.deleted_at.is_(None))
    if tenant_id is not None:
        stmt = stmt.where(Memory.tenant_id == tenant_id)
    if user_id is not None:
        stmt = stmt.where(Memory.user_id == user_id)
    if after is not None:
        after_tenant, after_id = after
        stmt = stmt.where(
            sa.or_(
                Memory.tenant_id > after_tenant,
                sa.and_(Memory.tenant_id == after_tenant, Memory.id > after_id),
            )
        )
    stmt = stmt.order_by(Memory.tenant_id, Memory.id).limit(limit)
    return list((await tx.execute(stmt)).scalars().all())


async def get_many(
    tx: AsyncSession, tenant_id: str, ids: Sequence[uuid.UUID], *, user_id: str | None = None
) -> list[Memory]:
    """The tenant's (or the user's) memories among `ids`, deleted ones included."""
    rows: list[Memory] = []
    for start in range(0, len(ids), _CHUNK):
        stmt = sa.select(Memory).where(
            Memory.tenant_id == tenant_id, Memory.id.in_(ids[start : start + _CHUNK])
        )
        if user_id is not None:
            stmt = stmt.where(Memory.user_id == user_id)
        rows.extend((await tx.execute(stmt)).scalars().all())
    return rows


async def ids_among(
    tx: AsyncSession, tenant_id: str, user_id: str, ids: Sequence[uuid.UUID]
) -> set[uuid.UUID]:
    """Which of `ids` the user's memories hold, deleted ones included (a replayed batch).
    Ids only: promotion asks this every pass, and whole rows cost their JSON and ORM
    objects for nothing."""
    found: set[uuid.UUID] = set()
    for start in range(0, len(ids), _CHUNK):
        stmt = sa.select(Memory.id).where(
            Memory.tenant_id == tenant_id,
            Memory.user_id == user_id,
            Memory.id.in_(ids[start : start + _CHUNK]),
        )
        found.update((await tx.execute(stmt)).scalars())
    return found


async def deleted_among(
    tx: AsyncSession, tenant_id: str, user_id: str, ids: Sequence[uuid.UUID]
) -> set[uuid.UUID]:
    """Which of `ids` are the user's deleted memories (ids only, as `ids_among`)."""
    found: set[uuid.UUID] = set()
    for start in range(0, len(ids), _CHUNK):
        stmt = sa.select(Memory.id).where(
            Memory.tenant_id == tenant_id,
            Memory.user_id == user_id,
            Memory.id.in_(ids[start : start + _CHUNK]),
            Memory.deleted_at.is_not(None),
        )
        found.update((await tx.execute(stmt)).scalars())
    return found


async def ids_by_hashes(
    tx: AsyncSession, tenant_id: str, user_id: str, hashes: Sequence[str]
) -> dict[str, uuid.UUID]:
    """A live memory of the user's for each text hash that has one (near-duplicate
    candidates); ids only, as `ids_among`."""
    found: dict[str, uuid.UUID] = {}
    for start in range(0, len(hashes), _CHUNK):
        stmt = sa.select(Memory.content_hash, Memory.id).where(
            Memory.tenant_id == tenant_id,
            Memory.user_id == user_id,
            Memory.content_hash.in_(hashes[start : start + _CHUNK]),
            Memory.deleted_at.is_(None),
        )
        for digest, memory_id in (await tx.execute(stmt)).all():
            found.setdefault(digest, memory_id)
    return found


class MemoryValues(TypedDict):
    """A new memory row."""

    id: uuid.UUID
    tenant_id: str
    user_id: str
    session_id: str | None
    memory_type: str
    content: str
    importance: float
    access_count: int
    last_accessed_at: datetime | None
    strength: float
    pinned: bool
    valid_from: datetime
    sources: list[dict[str, Any]]
    metadata_: dict[str, Any]
    content_hash: str
    created_at: datetime
    updated_at: datetime


class MemoryChanges(TypedDict, total=False):
    """Fields that change in place (`update_fields`)."""

    session_id: str | None
    sources: list[dict[str, Any]]
    memory_type: str
    content: str
    content_hash: str
    importance: float
    pinned: bool
    metadata_: dict[str, Any]
    updated_at: datetime


async def insert(tx: AsyncSession, values: MemoryValues) -> Memory:
    """Insert one memory; returns its row."""
    stmt = sa.insert(Memory).values(**values).returning(Memory)
    return (await tx.execute(stmt)).scalar_one()


async def insert_many(tx: AsyncSession, rows: Sequence[MemoryValues]) -> set[uuid.UUID]:
    """Insert memories, skipping ids already present: a re-run writes nothing twice.
    Returns the ids actually inserted."""
    inserted: set[uuid.UUID] = set()
    if not rows:
        return inserted
    # An executemany of one statement, which SQLAlchemy compiles once and batches into
    # multi-row INSERTs itself ("insertmanyvalues"): a multi-row `values([...])` was
    # compiled anew for every pass, ~10 ms of the event loop's time for a few dozen rows.
    stmt = _insert(tx, Memory).on_conflict_do_nothing(index_elements=["id"]).returning(Memory.id)
    for start in range(0, len(rows), _CHUNK):
        result = await tx.execute(stmt, [dict(r) for r in rows[start : start + _CHUNK]])
        inserted.update(result.scalars())
    return inserted


async def update_fields(
    tx: AsyncSession, tenant_id: str, user_id: str, memory_id: uuid.UUID, changes: MemoryChanges
) -> Memory:
    """Set these fields of the user's memory; returns the row as it now is (NoResultFound
    if the user has no such memory)."""
    stmt = (
        sa.update(Memory)
        .where(Memory.tenant_id == tenant_id, Memory.user_id == user_id, Memory.id == memory_id)
        .values(**changes)
        .returning(Memory)
        .execution_options(populate_existing=True)
    )
    return (await tx.execute(stmt)).scalar_one()


async def soft_delete(
    tx: AsyncSession, tenant_id: str, user_id: str, memory_id: uuid.UUID, now: datetime
) -> None:
    """The row stays, for its audit trail, but is no longer valid."""
    await tx.execute(
        sa.update(Memory)
        .where(Memory.tenant_id == tenant_id, Memory.user_id == user_id, Memory.id == memory_id)
        .values(deleted_at=now, valid_to=now, updated_at=now)
    )


_EVENTS = cast(sa.Table, MemoryEvent.__table__)
_MEMORIES = cast(sa.Table, Memory.__table__)


_INSERT_BOUND = Prepared(
    sqlite.insert(_MEMORIES).on_conflict_do_nothing(index_elements=["id"]),
    column_keys=[c.name for c in _MEMORIES.columns],
)
_UNSET = {c.name: None for c in _MEMORIES.columns}  # the columns a new row leaves empty


@dataclass(frozen=True, slots=True)
class BoundRows:
    """New memories with their values already converted for SQLite's driver
    (`bind_for_sqlite`): `params[i]` is the row of `ids[i]`, whose id is stored as
    `keys[i]`."""

    tenant_id: str
    user_id: str
    ids: list[uuid.UUID]
    keys: list[Any]
    params: list[tuple[Any, ...]]


def bind_for_sqlite(rows: Sequence[MemoryValues]) -> BoundRows | None:
    """Each row's values as SQLAlchemy would bind them for SQLite, computed before the
    write transaction: for promotion's batch of a few hundred turns the conversions
    (datetimes, JSON) are ~30 us a row, which the statement would otherwise spend while
    holding SQLite's one writer, that every ingest waits for (bench/README.md, "Ingest,
    promotion, memory"). None when a row is of a type context shows (a fact): those go
    through `insert_many`, whose statement the session watches (`app.stores.changes`)."""
    owners = {(r["tenant_id"], r["user_id"]) for r in rows}
    if len(owners) != 1 or any(r["memory_type"] in FACT_TYPES for r in rows):
        return None
    ((tenant_id, user_id),) = owners
    params = [
        _INSERT_BOUND.params(
            {**_UNSET, **{("metadata" if k == "metadata_" else k): v for k, v in r.items()}}
        )
        for r in rows
    ]
    at = _INSERT_BOUND.position("id")
    return BoundRows(tenant_id, user_id, [r["id"] for r in rows], [p[at] for p in params], params)


async def insert_bound(tx: AsyncSession, rows: BoundRows) -> set[uuid.UUID]:
    """`insert_many` of one user's rows bound ahead (SQLite only), in two statements of
    the driver: which of their ids the user has stored already (the transaction holds
    SQLite's writer, so none can appear in between; a promoted memory's id is derived from
    its session, which is its user's: no other user holds it), then one executemany of the rest.
    Returns the ids inserted."""
    conn = await tx.connection()
    stored: set[Any] = set()
    for start in range(0, len(rows.keys), _CHUNK):
        chunk = rows.keys[start : start + _CHUNK]
        marks = ", ".join("?" * len(chunk))
        found = await conn.exec_driver_sql(
            f"SELECT id FROM memories WHERE tenant_id = ? AND user_id = ? AND id IN ({marks})",
            (rows.tenant_id, rows.user_id, *chunk),
        )
        stored.update(row[0] for row in found)
    fresh = [n for n, key in enumerate(rows.keys) if key not in stored]
    if fresh:
        done = await conn.exec_driver_sql(_INSERT_BOUND.sql, [rows.params[n] for n in fresh])
        if done.rowcount != len(fresh):  # an id another user holds: not ours to log
            raise RuntimeError(f"inserted {done.rowcount} of {len(fresh)} new memories")
    return {rows.ids[n] for n in fresh}


_EVENT_COLUMNS = [c.name for c in _EVENTS.columns if c.name != "id"]
_INSERT_EVENTS_BOUND = Prepared(sa.insert(_EVENTS), column_keys=_EVENT_COLUMNS)


def bind_events_for_sqlite(events: Sequence[AuditEvent]) -> list[tuple[Any, ...]]:
    """`add_events`' rows bound for SQLite ahead of the transaction, as `bind_for_sqlite`."""
    return [_INSERT_EVENTS_BOUND.params(_event_row(e)) for e in events]


async def add_bound_events(tx: AsyncSession, params: Sequence[tuple[Any, ...]]) -> None:
    """`add_events` of events bound ahead (SQLite only): one executemany of the driver."""
    if params:
        conn = await tx.connection()
        await conn.exec_driver_sql(_INSERT_EVENTS_BOUND.sql, list(params))


def _event_row(e: AuditEvent) -> dict[str, Any]:
    return {
        "tenant_id": e.tenant_id,
        "user_id": e.user_id,
        "memory_id": e.memory_id,
        "event": e.event,
        "old_value": e.old,
        "new_value": e.new,
        "reason": e.reason,
        "created_at": e.at,
    }


async def add_events(tx: AsyncSession, events: Sequence[AuditEvent]) -> None:
    """Insert the events on the table itself: the ORM's bulk insert costs ~30% more CPU
    per row, on the event loop (a reinforcement flush writes thousands at once)."""
    rows = [_event_row(e) for e in events]
    for start in range(0, len(rows), _LOOP_ROWS):
        await tx.execute(sa.insert(_EVENTS), rows[start : start + _LOOP_ROWS])


async def page(
    tx: AsyncSession,
    tenant_id: str,
    user_id: str,
    *,
    memory_type: str | None,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
) -> list[Memory]:
    """Newest first, keyset-paginated on (created_at, id)."""
    stmt = sa.select(Memory).where(
        Memory.tenant_id == tenant_id, Memory.user_id == user_id, Memory.deleted_at.is_(None)
    )
    if memory_type is not None:
        stmt = stmt.where(Memory.memory_type == memory_type)
    if after is not None:
        created_at, memory_id = after
        stmt = stmt.where(
            sa.or_(
                Memory.created_at < created_at,
                sa.and_(Memory.created_at == created_at, Memory.id < memory_id),
            )
        )
    stmt = stmt.order_by(Memory.created_at.desc(), Memory.id.desc()).limit(limit)
    return list((await tx.execute(stmt)).scalars().all())


async def events_page(
    tx: AsyncSession, tenant_id: str, memory_id: uuid.UUID, *, after_id: int | None, limit: int
) -> list[MemoryEvent]:
    stmt = sa.select(MemoryEvent).where(
        MemoryEvent.tenant_id == tenant_id, MemoryEvent.memory_id == memory_id
    )
    if after_id is not None:
        stmt = stmt.where(MemoryEvent.id > after_id)
    stmt = stmt.order_by(MemoryEvent.id).limit(limit)
    return list((await tx.execute(stmt)).scalars().all())


async def of_session(
    tx: AsyncSession, tenant_id: str, user_id: str, session_id: str
) -> list[Memory]:
    stmt = sa.select(Memory).where(
        Memory.tenant_id == tenant_id,
        Memory.user_id == user_id,
        Memory.session_id == session_id,
        Memory.deleted_at.is_(None),
    )
    return list((await tx.execute(stmt)).scalars().all())


async def max_access_count(tx: AsyncSession, tenant_id: str, user_id: str) -> int:
    stmt = sa.select(User.max_access_count).where(User.tenant_id == tenant_id, User.id == user_id)
    return int((await tx.execute(stmt)).scalar_one_or_none() or 0)


async def lock_use(
    tx: AsyncSession, tenant_id: str, user_id: str, ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Use]:
    """The use so far of the user's live memories among `ids`, locked in id order, like
    merges and deletes, so that the three never deadlock."""
    if not ids:
        return {}
    # In id order across the slices too (`_LOOP_ROWS` ids a statement).
    ordered = sorted(set(ids))
    found: dict[uuid.UUID, Use] = {}
    for start in range(0, len(ordered), _LOOP_ROWS):
        stmt = (
            sa.select(Memory.id, Memory.strength, Memory.access_count, Memory.last_accessed_at)
            .where(
                Memory.tenant_id == tenant_id,
                Memory.user_id == user_id,
                Memory.id.in_(ordered[start : start + _LOOP_ROWS]),
                Memory.deleted_at.is_(None),
            )
            .order_by(Memory.id)
            .with_for_update()
        )
        for mid, strength, count, last in (await tx.execute(stmt)).all():
            found[mid] = Use(strength, count, last)
    return found


_SAVE_USE = (
    sa.update(_MEMORIES)
    .where(
        _MEMORIES.c.tenant_id == sa.bindparam("p_tenant"),
        _MEMORIES.c.user_id == sa.bindparam("p_user"),
        _MEMORIES.c.id == sa.bindparam("p_id"),
    )
    .values(
        strength=sa.bindparam("p_strength"),
        access_count=sa.bindparam("p_count"),
        last_accessed_at=sa.bindparam("p_last"),
    )
)


async def save_use(
    tx: AsyncSession, tenant_id: str, user_id: str, uses: Mapping[uuid.UUID, Use]
) -> None:
    """Write memories' use (rows locked by `lock_use`) and keep the user's highest access
    count, which normalises the usage share of importance."""
    if not uses:
        return
    # An executemany on the table itself, kept to the user's rows: the ORM's bulk UPDATE
    # by primary key cost twice the CPU per row, on the event loop.
    rows = [
        {
            "p_tenant": tenant_id,
            "p_user": user_id,
            "p_id": mid,
            "p_strength": use.strength,
            "p_count": use.access_count,
            "p_last": use.last_accessed_at,
        }
        for mid, use in uses.items()
    ]
    for start in range(0, len(rows), _LOOP_ROWS):
        await tx.execute(_SAVE_USE, rows[start : start + _LOOP_ROWS])
    top = max(use.access_count for use in uses.values())
    await tx.execute(
        sa.update(User)
        .where(User.tenant_id == tenant_id, User.id == user_id, User.max_access_count < top)
        .values(max_access_count=top)
    )


def _mentions_session(tx: AsyncSession, session_id: str) -> sa.ColumnElement[bool]:
    """Memories whose `sources` name the session (merged duplicates may name several)."""
    dialect = tx.bind.dialect.name if tx.bind is not None else "postgresql"
    if dialect == "postgresql":
        return Memory.sources.op("@>")(sa.cast([{"session_id": session_id}], JSONB))
    each = sa.func.json_each(Memory.sources).table_valued("value").alias("src")
    return sa.exists(
        sa.select(1)
        .select_from(each)
        .where(sa.func.json_extract(each.c.value, "$.session_id") == session_id)
    )


async def lock_of_session(
    tx: AsyncSession, tenant_id: str, user_id: str, session_id: str
) -> list[Memory]:
    """The user's memories filed under the session or naming it in their sources, deleted
    ones included, locked in id order (as every multi-row lock here), against a concurrent
    delete of another session of the same memory, a merge into it, or a reinforcement."""
    stmt = (
        sa.select(Memory)
        .where(
            Memory.tenant_id == tenant_id,
            Memory.user_id == user_id,
            sa.or_(Memory.session_id == session_id, _mentions_session(tx, session_id)),
        )
        .order_by(Memory.id)
        .with_for_update()
    )
    return list((await tx.execute(stmt)).scalars().all())


async def erase(tx: AsyncSession, tenant_id: str, user_id: str, ids: Sequence[uuid.UUID]) -> None:
    """Erasure, not a soft delete: the audit trail goes with the content it quotes. The
    tenant also leads `ix_memory_events_memory`, which a bare `memory_id` could not use."""
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        await tx.execute(
            sa.delete(MemoryEvent).where(
                MemoryEvent.tenant_id == tenant_id,
                MemoryEvent.user_id == user_id,
                MemoryEvent.memory_id.in_(chunk),
            )
        )
        await tx.execute(
            sa.delete(Memory).where(
                Memory.tenant_id == tenant_id, Memory.user_id == user_id, Memory.id.in_(chunk)
            )
        )


async def unfile(
    tx: AsyncSession, tenant_id: str, user_id: str, ids: Sequence[uuid.UUID], now: datetime
) -> None:
    """No longer filed under a session."""
    for start in range(0, len(ids), _CHUNK):
        await tx.execute(
            sa.update(Memory)
            .where(
                Memory.tenant_id == tenant_id,
                Memory.user_id == user_id,
                Memory.id.in_(ids[start : start + _CHUNK]),
            )
            .values(session_id=None, updated_at=now)
        )


async def lock_live(
    tx: AsyncSession, tenant_id: str, user_id: str, ids: Sequence[uuid.UUID]
) -> list[Memory]:
    """The user's memories among `ids` that are not deleted, locked for this transaction."""
    if not ids:
        return []
    stmt = (
        sa.select(Memory)
        .where(
            Memory.tenant_id == tenant_id,
            Memory.user_id == user_id,
            Memory.id.in_(ids),
            Memory.deleted_at.is_(None),
        )
        .order_by(Memory.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return list((await tx.execute(stmt)).scalars().all())


async def save_merge(
    tx: AsyncSession,
    tenant_id: str,
    user_id: str,
    memory_id: uuid.UUID,
    *,
    sources: list[dict[str, Any]],
    created_at: datetime,
    now: datetime,
) -> None:
    await tx.execute(
        sa.update(Memory)
        .where(Memory.tenant_id == tenant_id, Memory.user_id == user_id, Memory.id == memory_id)
        .values(sources=sources, created_at=created_at, updated_at=now)
    )


async def live_ids(
    tx: AsyncSession, tenant_id: str, user_id: str, ids: Sequence[uuid.UUID]
) -> set[uuid.UUID]:
    """The user's live memories among `ids`."""
    found: set[uuid.UUID] = set()
    for start in range(0, len(ids), _CHUNK):
        stmt = sa.select(Memory.id).where(
            Memory.tenant_id == tenant_id,
            Memory.user_id == user_id,
            Memory.id.in_(ids[start : start + _CHUNK]),
            Memory.deleted_at.is_(None),
        )
        found.update((await tx.execute(stmt)).scalars())
    return found


FACT_TYPES = ("semantic", "procedural")


# Context reads the user's facts on every call: the statement is built once. One branch
# per type, each with the type as an equality and its own limit, so that both databases
# read the newest straight from `ix_memories_user_type` (with `IN`, SQLite walked all of
# the user's memories newest first to find the few facts among them); the branches go as
# one UNION ALL statement, because each statement costs more than the few rows it reads.
_NEWEST = (Memory.created_at.desc(), Memory.id.desc())


def _newest_facts(*, at: bool) -> sa.Executable:
    branches = []
    for memory_type in FACT_TYPES:
        true_then: list[sa.ColumnElement[bool]] = (
            [
                Memory.created_at <= sa.bindparam("p_at"),
                sa.or_(Memory.valid_to.is_(None), Memory.valid_to > sa.bindparam("p_at")),
            ]
            if at
            else [Memory.valid_to.is_(None)]
        )
        branch = (
            sa.select(Memory)
            .where(
                Memory.tenant_id == sa.bindparam("p_tenant"),
                Memory.user_id == sa.bindparam("p_user"),
                Memory.memory_type == memory_type,
                Memory.deleted_at.is_(None),
                *true_then,
            )
            .order_by(*_NEWEST)
            .limit(sa.bindparam("p_limit"))
        )
        branches.append(sa.select(branch.subquery(f"newest_{memory_type}")))
    return sa.select(Memory).from_statement(sa.union_all(*branches))


_FACTS_NOW = _newest_facts(at=False)
_FACTS_AT = _newest_facts(at=True)


async def current_facts(
    tx: AsyncSession, tenant_id: str, user_id: str, *, at: datetime | None, limit: int
) -> list[Memory]:
    """The user's semantic and procedural memories true at `at` (None: now), newest first:
    begun by then, not ended by then, not deleted."""
    params: dict[str, Any] = {"p_tenant": tenant_id, "p_user": user_id, "p_limit": limit}
    if at is not None:
        params["p_at"] = at
    result = await tx.execute(_FACTS_NOW if at is None else _FACTS_AT, params)
    found = list(result.scalars().all())
    found.sort(key=lambda m: (m.created_at, m.id), reverse=True)
    return found[:limit]


async def lock_facts(
    tx: AsyncSession, tenant_id: str, user_id: str, ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Memory]:
    """The user's live facts among `ids`, locked in id order (as every multi-row lock)."""
    if not ids:
        return {}
    stmt = (
        sa.select(Memory)
        .where(
            Memory.tenant_id == tenant_id,
            Memory.user_id == user_id,
            Memory.id.in_(list(ids)),
            Memory.deleted_at.is_(None),
        )
        .order_by(Memory.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return {m.id: m for m in (await tx.execute(stmt)).scalars()}


async def end_validity(
    tx: AsyncSession,
    tenant_id: str,
    memory_id: uuid.UUID,
    *,
    valid_to: datetime,
    superseded_by: uuid.UUID | None,
    now: datetime,
) -> None:
    """The fact stops being true at `valid_to`; the row stays, for history and `as_of`."""
    await tx.execute(
        sa.update(Memory)
        .where(Memory.tenant_id == tenant_id, Memory.id == memory_id)
        .values(valid_to=valid_to, superseded_by=superseded_by, updated_at=now)
    )
