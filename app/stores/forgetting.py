"""Queries of forgetting: tenants' policies, the sweep's scan, tombstones, restores, purges."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.stores.models import ForgettingPolicy, Memory
from app.stores.sessions import _insert

_CHUNK = 400


async def get_policy(tx: AsyncSession, tenant_id: str) -> dict[str, Any] | None:
    stmt = sa.select(ForgettingPolicy.policy).where(ForgettingPolicy.tenant_id == tenant_id)
    value = (await tx.execute(stmt)).scalar_one_or_none()
    return dict(value) if value is not None else None


async def put_policy(
    tx: AsyncSession, tenant_id: str, policy: dict[str, Any], now: datetime
) -> None:
    stmt = _insert(tx, ForgettingPolicy).values(tenant_id=tenant_id, policy=policy, updated_at=now)
    stmt = stmt.on_conflict_do_update(
        index_elements=["tenant_id"], set_={"policy": policy, "updated_at": now}
    )
    await tx.execute(stmt)


@dataclass(frozen=True, slots=True)
class SweepRow:
    """What the sweep decides a memory's fate by, without its text: the sweep reads every
    live memory of a tenant each day, and whole rows (content, sources, metadata, as ORM
    objects) made that pass cost a core for ~40 s at 100k memories, beside the requests of
    an embedded service. The rows it acts on are read again whole, under a lock."""

    id: uuid.UUID
    tenant_id: str
    strength: float
    access_count: int
    importance: float
    pinned: bool
    created_at: datetime
    last_accessed_at: datetime | None
    updated_at: datetime


_SWEPT = (
    Memory.id,
    Memory.tenant_id,
    Memory.strength,
    Memory.access_count,
    Memory.importance,
    Memory.pinned,
    Memory.created_at,
    Memory.last_accessed_at,
    Memory.updated_at,
)


async def sweep_page(
    tx: AsyncSession,
    *,
    tenant_id: str | None,
    user_id: str | None,
    after: tuple[str, uuid.UUID] | None,
    limit: int,
) -> list[SweepRow]:
    """Live memories not pinned, of one tenant (and user) or of all, in (tenant_id, id)
    order from after the key `after`."""
    stmt = sa.select(*_SWEPT).where(Memory.deleted_at.is_(None), Memory.pinned.is_(False))
    if tenant_id is not None:
        stmt = stmt.where(Memory.tenant_id == tenant_id)
    if user_id is not None:
        stmt = stmt.where(Memory.user_id == user_id)
    if after is not None:
        # A row-value comparison: one seek on `ix_memories_tenant_id`, where the same
        # test spelt with OR walked the index from its start on every page.
        stmt = stmt.where(sa.tuple_(Memory.tenant_id, Memory.id) > sa.tuple_(*after))
    stmt = stmt.order_by(Memory.tenant_id, Memory.id).limit(limit)
    return [SweepRow(*row) for row in (await tx.execute(stmt)).all()]


async def unpinned(
    tx: AsyncSession, tenant_id: str, ids: Sequence[uuid.UUID], *, lock: bool = False
) -> list[Memory]:
    """The tenant's live, unpinned memories among `ids`, whole, in id order; with `lock`,
    locked in that order (as every multi-row lock on memories) and re-read: a recall
    flushed meanwhile is seen."""
    if not ids:
        return []
    stmt = (
        sa.select(Memory)
        .where(
            Memory.tenant_id == tenant_id,
            Memory.id.in_(ids),
            Memory.deleted_at.is_(None),
            Memory.pinned.is_(False),
        )
        .order_by(Memory.id)
        .execution_options(populate_existing=True)
    )
    if lock:
        stmt = stmt.with_for_update()
    return list((await tx.execute(stmt)).scalars().all())


async def forget(tx: AsyncSession, tenant_id: str, ids: Sequence[uuid.UUID], now: datetime) -> None:
    """Tombstone: `deleted_at` hides it from every read, `forgotten_at` makes it
    restorable. By tenant, not user: the sweep of a tenant covers all its users."""
    for start in range(0, len(ids), _CHUNK):
        await tx.execute(
            sa.update(Memory)
            .where(Memory.tenant_id == tenant_id, Memory.id.in_(ids[start : start + _CHUNK]))
            .values(forgotten_at=now, deleted_at=now, updated_at=now)
        )


async def pin(tx: AsyncSession, tenant_id: str, ids: Sequence[uuid.UUID], now: datetime) -> None:
    for start in range(0, len(ids), _CHUNK):
        await tx.execute(
            sa.update(Memory)
            .where(Memory.tenant_id == tenant_id, Memory.id.in_(ids[start : start + _CHUNK]))
            .values(pinned=True, updated_at=now)
        )


async def lock_any(
    tx: AsyncSession, tenant_id: str, user_id: str, memory_id: uuid.UUID
) -> Memory | None:
    """The user's memory whatever its state (live, deleted, forgotten, purged), locked."""
    stmt = (
        sa.select(Memory)
        .where(Memory.id == memory_id, Memory.tenant_id == tenant_id, Memory.user_id == user_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return (await tx.execute(stmt)).scalar_one_or_none()


async def restore(
    tx: AsyncSession, tenant_id: str, user_id: str, memory_id: uuid.UUID, now: datetime
) -> Memory:
    """Live again, and used now: a restored memory is not forgotten by the next sweep.
    NoResultFound if the user has no such memory."""
    stmt = (
        sa.update(Memory)
        .where(Memory.tenant_id == tenant_id, Memory.user_id == user_id, Memory.id == memory_id)
        .values(forgotten_at=None, deleted_at=None, last_accessed_at=now, updated_at=now)
        .returning(Memory)
        .execution_options(populate_existing=True)
    )
    return (await tx.execute(stmt)).scalar_one()


async def due_for_purge(
    tx: AsyncSession,
    *,
    tenant_id: str | None,
    user_id: str | None,
    forgotten_before: datetime,
    limit: int,
) -> list[Memory]:
    stmt = sa.select(Memory).where(
        Memory.forgotten_at.is_not(None),
        Memory.purged_at.is_(None),
        Memory.forgotten_at < forgotten_before,
    )
    if tenant_id is not None:
        stmt = stmt.where(Memory.tenant_id == tenant_id)
    if user_id is not None:
        stmt = stmt.where(Memory.user_id == user_id)
    stmt = stmt.order_by(Memory.forgotten_at).limit(limit)
    return list((await tx.execute(stmt)).scalars().all())


async def purge(tx: AsyncSession, tenant_id: str, ids: Sequence[uuid.UUID], now: datetime) -> None:
    """The content goes; the row stays as a tombstone, so its history stays readable and a
    restore can say it came too late."""
    for start in range(0, len(ids), _CHUNK):
        await tx.execute(
            sa.update(Memory)
            .where(
                Memory.tenant_id == tenant_id,
                Memory.id.in_(ids[start : start + _CHUNK]),
                Memory.purged_at.is_(None),
            )
            .values(purged_at=now, content="", content_hash="", metadata_={}, updated_at=now)
        )
