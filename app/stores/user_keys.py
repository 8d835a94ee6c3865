"""Users' data keys (`user_keys`): what the Qdrant server's payload text is sealed under
(`app.core.sealing`, docs/privacy.md "What stays on disk").

A key is made with the user's row (`app.stores.sessions.ensure_user`), before anything of
theirs is written, and deleted in the erasure's last transaction with that row
(`app.stores.users.delete`). A process reads keys through `UserKeys`, whose cache serves
reads only: sealing always takes the key from the table, so a key cached before an erasure
never seals the text of the user made again under the same id. An index write inside the
transaction that made the user (`POST /v1/memories` for a new user) cannot read the key
from the table before the commit: it takes it from that transaction (`_made`).
"""

from __future__ import annotations

from collections import OrderedDict
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.core import sealing
from app.stores.db import Database
from app.stores.models import User, UserKey

# The key `create` made last in this task, with its transaction: valid while that is open.
_made: ContextVar[tuple[str, str, bytes, AsyncSession] | None] = ContextVar(
    "strata_user_key_made", default=None
)


def _insert(tx: AsyncSession) -> Any:
    dialect = tx.bind.dialect.name if tx.bind is not None else "postgresql"
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(UserKey)


async def create(tx: AsyncSession, tenant_id: str, user_id: str, now: datetime) -> None:
    """The user's key, unless they have one: with their row, so before any point of theirs."""
    key = sealing.new_key()
    stmt = _insert(tx).values(
        tenant_id=tenant_id, user_id=user_id, key=key, sealed_from_start=True, created_at=now
    )
    result = await tx.execute(stmt.on_conflict_do_nothing(index_elements=["tenant_id", "user_id"]))
    if result.rowcount:  # type: ignore[attr-defined]
        _made.set((tenant_id, user_id, key, tx))


def _made_here(tenant_id: str, user_id: str) -> bytes | None:
    """The key this task's open transaction made for the user, not yet committed."""
    made = _made.get()
    if made is None or made[:2] != (tenant_id, user_id) or not made[3].in_transaction():
        return None
    return made[2]


async def adopt(tx: AsyncSession, tenant_id: str, user_id: str, now: datetime) -> None:
    """A key for a user whose row exists without one (written by a version before keys):
    not `sealed_from_start`, since points of theirs may have been written plain. None
    for a user without a row (erased)."""
    picked = sa.select(
        User.tenant_id,
        User.id,
        sa.literal(sealing.new_key(), sa.LargeBinary()),
        sa.literal(False),
        sa.literal(now, UserKey.created_at.type),
    ).where(User.tenant_id == tenant_id, User.id == user_id)
    columns = ["tenant_id", "user_id", "key", "sealed_from_start", "created_at"]
    stmt = _insert(tx).from_select(columns, picked)
    await tx.execute(stmt.on_conflict_do_nothing(index_elements=["tenant_id", "user_id"]))


_GET = sa.select(UserKey.key).where(
    UserKey.tenant_id == sa.bindparam("p_tenant"), UserKey.user_id == sa.bindparam("p_user")
)


async def get(tx: AsyncSession, tenant_id: str, user_id: str) -> bytes | None:
    result = await tx.execute(_GET, {"p_tenant": tenant_id, "p_user": user_id})
    key: bytes | None = result.scalar_one_or_none()
    return key


async def sealed_from_start(tx: AsyncSession, tenant_id: str, user_id: str) -> bool:
    """Whether the user's key was made before any point of theirs (false without a key)."""
    stmt = sa.select(UserKey.sealed_from_start).where(
        UserKey.tenant_id == tenant_id, UserKey.user_id == user_id
    )
    return bool((await tx.execute(stmt)).scalar_one_or_none())


async def delete(tx: AsyncSession, tenant_id: str, user_id: str) -> None:
    """Destroy the user's key: what was sealed under it no longer opens, wherever it lies."""
    await tx.execute(
        sa.delete(UserKey)
        .where(UserKey.tenant_id == tenant_id, UserKey.user_id == user_id)
        .execution_options(synchronize_session=False)
    )


class UserKeys:
    """The keys as the index reads them: `for_write` from the table every time,
    `for_read` through a bounded cache of this process (a recall reads one user's key),
    which `forget` empties for a user being erased and `for_read(fresh=True)` refreshes
    (a value that does not open under the cached key was sealed under a newer one)."""

    def __init__(self, db: Database, *, cache_size: int = 10_000) -> None:
        self.db = db
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[str, str], bytes | None] = OrderedDict()

    async def for_write(self, tenant_id: str, user_id: str) -> bytes | None:
        """The user's key as the table holds it now, or as this task's open transaction
        made it; None when they have none and no row (erased): what is written for them
        then must not be readable."""
        async with self.db.read() as tx:
            key = await get(tx, tenant_id, user_id)
        if key is None and (made := _made_here(tenant_id, user_id)) is not None:
            return made
        if key is None:
            async with self.db.transaction() as tx:
                await adopt(tx, tenant_id, user_id, datetime.now(UTC))
                key = await get(tx, tenant_id, user_id)
        self._remember((tenant_id, user_id), key)
        return key

    async def for_read(self, tenant_id: str, user_id: str, *, fresh: bool = False) -> bytes | None:
        owner = (tenant_id, user_id)
        if not fresh and owner in self._cache:
            self._cache.move_to_end(owner)
            return self._cache[owner]
        async with self.db.read() as tx:
            key = await get(tx, tenant_id, user_id)
        self._remember(owner, key)
        return key

    def forget(self, tenant_id: str, user_id: str) -> None:
        self._cache.pop((tenant_id, user_id), None)

    def _remember(self, owner: tuple[str, str], key: bytes | None) -> None:
        self._cache[owner] = key
        self._cache.move_to_end(owner)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
