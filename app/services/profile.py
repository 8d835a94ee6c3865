"""Profiles (docs/facts.md): a user's structured attributes, changed by JSON merge-patch,
beside the facts extraction learned; context shows both in its profile section."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.profile import merge_patch
from app.errors import InvalidInput, ProfileTooLarge, UserErasureInProgress
from app.schemas.common import Source
from app.schemas.profile import MAX_PROFILE_BYTES, Profile, ProfileFact
from app.stores import memories as memory_store
from app.stores import users as user_store
from app.stores.db import Database
from app.stores.models import Memory


class ProfileService:
    def __init__(self, db: Database, *, max_facts: int = 100) -> None:
        self.db = db
        self.max_facts = max_facts

    async def get(self, tenant_id: str, user_id: str, *, as_of: datetime | None = None) -> Profile:
        """The attributes (as they are now: they have no history) and the facts true at
        `as_of` (None: now). A user Strata has never seen has an empty profile."""
        async with self.db.read() as tx:
            return await self.read(tx, tenant_id, user_id, as_of=as_of)

    async def read(
        self, tx: AsyncSession, tenant_id: str, user_id: str, *, as_of: datetime | None = None
    ) -> Profile:
        """`get` in the caller's transaction (context reads the summaries in the same one)."""
        attributes = await user_store.profile(tx, tenant_id, user_id) or {}
        facts = await memory_store.current_facts(
            tx, tenant_id, user_id, at=as_of, limit=self.max_facts
        )
        return Profile(user_id=user_id, attributes=attributes, facts=[fact_out(f) for f in facts])

    async def patch(self, tenant_id: str, user_id: str, patch: Any) -> Profile:
        """Apply an RFC 7396 merge-patch to the attributes, under the user's row lock."""
        if not isinstance(patch, dict):
            raise InvalidInput("body", "a profile merge-patch must be a JSON object")
        async with self.db.transaction() as tx:
            current, erasure = await user_store.lock_profile(
                tx, tenant_id, user_id, datetime.now(UTC)
            )
            if erasure is not None:
                raise UserErasureInProgress(user_id, erasure.get("job_id"))
            merged = merge_patch(current, patch)
            _check_timezone(merged.get("timezone"))
            size = len(orjson.dumps(merged))
            if size > MAX_PROFILE_BYTES:
                raise ProfileTooLarge(size, MAX_PROFILE_BYTES)
            await user_store.save_profile(tx, tenant_id, user_id, merged)
        return await self.get(tenant_id, user_id)


def _check_timezone(name: object) -> None:
    """Summaries read `timezone` as an IANA name: refuse another value when it is written,
    rather than summarise in UTC from then on with only a log line to say so."""
    if name is None:
        return
    if isinstance(name, str) and name:
        try:
            ZoneInfo(name)
            return
        except (ZoneInfoNotFoundError, ValueError):
            pass
    raise InvalidInput("timezone", "must be an IANA time zone name, e.g. Europe/Lisbon")


def fact_out(row: Memory) -> ProfileFact:
    return ProfileFact(
        id=row.id,
        content=row.content,
        memory_type=row.memory_type,
        importance=row.importance,
        valid_from=row.valid_from,
        created_at=row.created_at,
        sources=[Source.model_validate(s) for s in row.sources],
    )
