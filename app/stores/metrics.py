"""The scrape-time figures of `/metrics`: index lag and memories by type.

Operations queries: like the worker's backlog claim they span every tenant, and report per
tenant (grouped by `tenant_id`), never per user.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.metrics import IndexLag, MemoryCount
from app.stores.models import Memory, Session


async def index_lag(tx: AsyncSession) -> list[IndexLag]:
    """Per tenant, the sessions and messages accepted and not yet indexed. Reads only the
    sessions behind (the backlog index of migration 2026_11_30_backlog_index serves it)."""
    behind = Session.last_seq - Session.indexed_seq
    result = await tx.execute(
        sa.select(Session.tenant_id, sa.func.count(), sa.func.sum(behind))
        .where(Session.last_seq > Session.indexed_seq)
        .group_by(Session.tenant_id)
    )
    return [IndexLag(tenant, int(n), int(total or 0)) for tenant, n, total in result.all()]


async def memories_by_type(tx: AsyncSession) -> list[MemoryCount]:
    result = await tx.execute(
        sa.select(Memory.tenant_id, Memory.memory_type, sa.func.count())
        .where(Memory.deleted_at.is_(None))
        .group_by(Memory.tenant_id, Memory.memory_type)
    )
    return [MemoryCount(tenant, kind, int(n)) for tenant, kind, n in result.all()]
