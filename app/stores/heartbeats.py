"""Queries on the workers' heartbeats: each running worker's last sign of life."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.stores.models import WorkerHeartbeat


async def beat(tx: AsyncSession, owner: str, started_at: datetime, now: datetime) -> None:
    dialect = tx.bind.dialect.name if tx.bind is not None else "postgresql"
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(WorkerHeartbeat).values(owner=owner, started_at=started_at, beat_at=now)
    await tx.execute(stmt.on_conflict_do_update(index_elements=["owner"], set_={"beat_at": now}))


async def latest(tx: AsyncSession) -> WorkerHeartbeat | None:
    stmt = sa.select(WorkerHeartbeat).order_by(WorkerHeartbeat.beat_at.desc()).limit(1)
    return (await tx.execute(stmt)).scalar_one_or_none()


async def forget(tx: AsyncSession, owner: str) -> None:
    """A worker stopping cleanly removes its row; one that died leaves it to go stale."""
    await tx.execute(sa.delete(WorkerHeartbeat).where(WorkerHeartbeat.owner == owner))


async def purge_before(tx: AsyncSession, before: datetime) -> None:
    await tx.execute(sa.delete(WorkerHeartbeat).where(WorkerHeartbeat.beat_at < before))
