"""Queries on users: the profile's structured attributes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.stores.models import User
from app.stores.sessions import ensure_user


async def profile(tx: AsyncSession, tenant_id: str, user_id: str) -> dict[str, Any] | None:
    """The user's attributes; None for a user Strata has never seen."""
    stmt = sa.select(User.profile).where(User.tenant_id == tenant_id, User.id == user_id)
    row = (await tx.execute(stmt)).first()
    return dict(row[0] or {}) if row is not None else None


async def lock_profile(
    tx: AsyncSession, tenant_id: str, user_id: str, now: datetime
) -> dict[str, Any]:
    """The user's attributes, locked for a read-modify-write; the user is created if new."""
    await ensure_user(tx, tenant_id, user_id, now)
    stmt = (
        sa.select(User.profile)
        .where(User.tenant_id == tenant_id, User.id == user_id)
        .with_for_update()
    )
    return dict((await tx.execute(stmt)).scalar_one() or {})


async def save_profile(
    tx: AsyncSession, tenant_id: str, user_id: str, attributes: dict[str, Any]
) -> None:
    await tx.execute(
        sa.update(User)
        .where(User.tenant_id == tenant_id, User.id == user_id)
        .values(profile=attributes)
    )
