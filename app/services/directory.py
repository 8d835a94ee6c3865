"""What the console (app/console) lists that no REST route does: a tenant's users, one user's
sessions and the jobs about them. Keyset pages with the one cursor (app/services/cursors.py):
a tenant of any size is read a page at a time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from app.services.cursors import encode_cursor, one_id, one_str
from app.stores import users as user_store
from app.stores.db import Database
from app.stores.models import Job, Session, User

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


class DirectoryService:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def users(
        self, tenant_id: str, prefix: str | None, cursor: str | None, limit: int
    ) -> Page[User]:
        """The tenant's users in id order, those whose id starts with `prefix`."""
        async with self.db.read() as tx:
            rows = await user_store.tenant_users_page(
                tx, tenant_id, prefix=prefix, after=one_str(cursor), limit=limit + 1
            )
        more = len(rows) > limit
        rows = rows[:limit]
        return Page(rows, encode_cursor(rows[-1].id) if more else None)

    async def sessions(
        self, tenant_id: str, user_id: str, cursor: str | None, limit: int
    ) -> Page[Session]:
        async with self.db.read() as tx:
            rows = await user_store.sessions_page(
                tx, tenant_id, user_id, after=one_str(cursor), limit=limit + 1
            )
        more = len(rows) > limit
        rows = rows[:limit]
        return Page(rows, encode_cursor(rows[-1].id) if more else None)

    async def jobs(self, tenant_id: str, user_id: str, cursor: str | None, limit: int) -> Page[Job]:
        async with self.db.read() as tx:
            rows = await user_store.jobs_page(
                tx, tenant_id, user_id, after=one_id(cursor), limit=limit + 1
            )
        more = len(rows) > limit
        rows = rows[:limit]
        return Page(rows, encode_cursor(str(rows[-1].id)) if more else None)
