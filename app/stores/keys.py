"""Queries on tenants and API keys (docs/security.md).

Two reads here cross tenants on purpose, and the tenant-scoping test allows them by name:
`find` (the gate looks a key up by its id before it knows whose key it is) and `count_active`
(the start-up check that a server requiring keys has some). `page` crosses tenants only for
the operator, who passes no tenant.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.stores.models import ApiKey, Tenant
from app.stores.sessions import _insert


async def ensure_tenant(tx: AsyncSession, tenant_id: str, now: datetime) -> None:
    stmt = _insert(tx, Tenant).values(id=tenant_id, name=tenant_id, created_at=now)
    await tx.execute(stmt.on_conflict_do_nothing(index_elements=["id"]))


async def insert(tx: AsyncSession, key: ApiKey) -> None:
    tx.add(key)
    await tx.flush()


async def find(tx: AsyncSession, key_id: uuid.UUID) -> ApiKey | None:
    """The key of this id, whichever tenant holds it (the gate's look-up)."""
    return (await tx.execute(sa.select(ApiKey).where(ApiKey.id == key_id))).scalar_one_or_none()


async def count_active(tx: AsyncSession) -> int:
    """Keys not revoked, across tenants (the start-up check)."""
    stmt = sa.select(sa.func.count()).select_from(ApiKey).where(ApiKey.revoked_at.is_(None))
    return int((await tx.execute(stmt)).scalar_one())


async def page(
    tx: AsyncSession,
    tenant_id: str | None,
    *,
    after: uuid.UUID | None,
    limit: int,
    include_revoked: bool,
) -> list[ApiKey]:
    """Keys by id; `tenant_id` None: every tenant's (the operator)."""
    stmt = sa.select(ApiKey).order_by(ApiKey.id).limit(limit)
    if tenant_id is not None:
        stmt = stmt.where(ApiKey.tenant_id == tenant_id)
    if after is not None:
        stmt = stmt.where(ApiKey.id > after)
    if not include_revoked:
        stmt = stmt.where(ApiKey.revoked_at.is_(None))
    return list((await tx.execute(stmt)).scalars())


async def revoke(
    tx: AsyncSession, tenant_id: str | None, key_id: uuid.UUID, now: datetime
) -> ApiKey | None:
    """Marks the key revoked (once: a second revoke keeps the first time); None when no key
    of this id belongs to the tenant (`tenant_id` None: to any tenant, the operator)."""
    stmt = sa.select(ApiKey).where(ApiKey.id == key_id).with_for_update()
    if tenant_id is not None:
        stmt = stmt.where(ApiKey.tenant_id == tenant_id)
    key = (await tx.execute(stmt)).scalar_one_or_none()
    if key is None:
        return None
    if key.revoked_at is None:
        await tx.execute(
            sa.update(ApiKey)
            .where(ApiKey.tenant_id == key.tenant_id, ApiKey.id == key_id)
            .values(revoked_at=now)
        )
        tx.expunge(key)  # the copy returned says revoked; the UPDATE above wrote it
        key.revoked_at = now
    return key
