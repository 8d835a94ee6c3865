"""Store functions that act on rows by id name the tenant too (docs/security.md, "Tenant
scoping"): handed tenant A's real ids with tenant B (or, where they take one, with another
user of A), they find, change and delete nothing. `tests/tenancy.py` checks that every
statement names a tenant; these check that the one named is the one that counts. Each case
then runs with the right owner, so a check that passes because nothing ever changes fails.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import NoResultFound
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.audit import AuditEvent
from app.core.reinforcement import Use
from app.stores import forgetting as forget_store
from app.stores import memories as memory_store
from app.stores import summaries as summary_store
from app.stores.db import Database
from app.stores.models import Memory, MemoryEvent, Summary
from tests.conftest import Running

NOW = datetime(2026, 6, 1, tzinfo=UTC)
LATER = NOW + timedelta(days=3)


@dataclass(frozen=True, slots=True)
class Owner:
    tenant_id: str
    user_id: str


@dataclass(frozen=True, slots=True)
class Seeded:
    """Tenant A's user's two memories (each with an audit event) and one summary."""

    owner: Owner
    memories: list[uuid.UUID]
    summary: uuid.UUID


def _memory(owner: Owner, n: int) -> memory_store.MemoryValues:
    return {
        "id": uuid.uuid4(),
        "tenant_id": owner.tenant_id,
        "user_id": owner.user_id,
        "session_id": "s1",
        "memory_type": "semantic",
        "content": f"ana's secret number {n}",
        "importance": 0.5,
        "access_count": 1,
        "last_accessed_at": NOW,
        "strength": 1.0,
        "pinned": False,
        "valid_from": NOW,
        "sources": [{"session_id": "s1", "seq": n}],
        "metadata_": {"n": n},
        "content_hash": f"hash-{n}",
        "created_at": NOW,
        "updated_at": NOW,
    }


async def seed(db: Database, owner: Owner) -> Seeded:
    rows = [_memory(owner, n) for n in (1, 2)]
    async with db.transaction() as tx:
        for row in rows:
            await memory_store.insert(tx, row)
        await memory_store.add_events(
            tx,
            [
                AuditEvent(
                    owner.tenant_id,
                    owner.user_id,
                    row["id"],
                    "created",
                    old=None,
                    new={"content": row["content"]},
                    reason="seeded",
                    at=NOW,
                )
                for row in rows
            ],
        )
        summary = await summary_store.upsert(
            tx,
            {
                "id": uuid.uuid4(),
                "tenant_id": owner.tenant_id,
                "user_id": owner.user_id,
                "level": "daily",
                "period_start": NOW,
                "period_end": NOW + timedelta(days=1),
                "timezone": "UTC",
                "content": "ana's day",
                "sources": [],
                "source_hash": "h",
                "tokens": 2,
                "method": "extractive",
                "llm_usage": None,
                "created_at": NOW,
                "updated_at": NOW,
            },
        )
    return Seeded(owner, [r["id"] for r in rows], summary.id)


async def state(db: Database, seeded: Seeded) -> dict[str, Any]:
    """Everything stored of the seeded rows, read by this test's own SQL (unscoped on
    purpose: it must see the rows whoever owns them)."""
    memories, events, summaries = Memory.__table__, MemoryEvent.__table__, Summary.__table__
    async with db.read() as tx:
        rows = (
            await tx.execute(
                sa.select(memories).where(memories.c.id.in_(seeded.memories)).order_by("id")
            )
        ).mappings()
        audit = (
            await tx.execute(
                sa.select(events.c.memory_id, events.c.event).where(
                    events.c.memory_id.in_(seeded.memories)
                )
            )
        ).all()
        summary = (
            await tx.execute(sa.select(summaries).where(summaries.c.id == seeded.summary))
        ).mappings()
        return {
            "memories": [dict(r) for r in rows],
            "events": sorted((str(m), e) for m, e in audit),
            "summary": [dict(r) for r in summary],
        }


Write = Callable[[AsyncSession, Owner, Seeded], Awaitable[object]]


def _use(ids: list[uuid.UUID]) -> dict[uuid.UUID, Use]:
    return {mid: Use(strength=9.0, access_count=42, last_accessed_at=LATER) for mid in ids}


# Every store function that changes rows by id. `by_user`: it takes the user as well.
WRITES: dict[str, tuple[Write, bool]] = {
    "memories.erase": (
        lambda tx, o, s: memory_store.erase(tx, o.tenant_id, o.user_id, s.memories),
        True,
    ),
    "memories.soft_delete": (
        lambda tx, o, s: memory_store.soft_delete(tx, o.tenant_id, o.user_id, s.memories[0], LATER),
        True,
    ),
    "memories.update_fields": (
        lambda tx, o, s: memory_store.update_fields(
            tx,
            o.tenant_id,
            o.user_id,
            s.memories[0],
            {"content": "overwritten", "pinned": True, "updated_at": LATER},
        ),
        True,
    ),
    "memories.unfile": (
        lambda tx, o, s: memory_store.unfile(tx, o.tenant_id, o.user_id, s.memories, LATER),
        True,
    ),
    "memories.save_merge": (
        lambda tx, o, s: memory_store.save_merge(
            tx, o.tenant_id, o.user_id, s.memories[0], sources=[], created_at=LATER, now=LATER
        ),
        True,
    ),
    "memories.save_use": (
        lambda tx, o, s: memory_store.save_use(tx, o.tenant_id, o.user_id, _use(s.memories)),
        True,
    ),
    "forgetting.forget": (
        lambda tx, o, s: forget_store.forget(tx, o.tenant_id, s.memories, LATER),
        False,
    ),
    "forgetting.pin": (
        lambda tx, o, s: forget_store.pin(tx, o.tenant_id, s.memories, LATER),
        False,
    ),
    "forgetting.purge": (
        lambda tx, o, s: forget_store.purge(tx, o.tenant_id, s.memories, LATER),
        False,
    ),
    "forgetting.restore": (
        lambda tx, o, s: forget_store.restore(tx, o.tenant_id, o.user_id, s.memories[0], LATER),
        True,
    ),
    "summaries.delete_ids": (
        lambda tx, o, s: summary_store.delete_ids(tx, o.tenant_id, o.user_id, [s.summary]),
        True,
    ),
}


@pytest.fixture
def owners(ids: Callable[[str], str]) -> tuple[Owner, list[Owner]]:
    """Tenant A's user, and who must not reach her rows: tenant B's user of the same name
    (only the tenant tells them apart) and another user of tenant A."""
    a, b, user = ids("tenant-a"), ids("tenant-b"), ids("ana")
    return Owner(a, user), [Owner(b, user), Owner(a, ids("bob"))]


@pytest.mark.parametrize("name", sorted(WRITES))
async def test_a_write_by_id_under_another_owner_changes_nothing(
    running: Running, owners: tuple[Owner, list[Owner]], name: str
) -> None:
    write, by_user = WRITES[name]
    db = running.resources.db
    ana, others = owners
    seeded = await seed(db, ana)
    before = await state(db, seeded)
    assert len(before["memories"]) == 2
    assert len(before["events"]) == 2
    assert len(before["summary"]) == 1

    for other in others if by_user else others[:1]:
        try:
            async with db.transaction() as tx:
                await write(tx, other, seeded)
        except NoResultFound:  # update ... returning: the owner has no such row
            pass
        assert await state(db, seeded) == before, f"{name} as {other} reached ana's rows"

    async with db.transaction() as tx:
        await write(tx, ana, seeded)
    assert await state(db, seeded) != before, f"{name} as ana herself changed nothing"


async def test_a_read_by_id_under_another_owner_finds_nothing(
    running: Running, owners: tuple[Owner, list[Owner]]
) -> None:
    db = running.resources.db
    ana, (tenant_b, bob) = owners
    seeded = await seed(db, ana)
    mine = sorted(seeded.memories)

    async with db.transaction() as tx:
        assert await memory_store.get_many(tx, tenant_b.tenant_id, seeded.memories) == []
        assert (
            await memory_store.get_many(tx, ana.tenant_id, seeded.memories, user_id=bob.user_id)
            == []
        )
        for other in (tenant_b, bob):
            assert (
                await memory_store.lock_live(tx, other.tenant_id, other.user_id, seeded.memories)
                == []
            )
            assert (
                await summary_store.get(tx, other.tenant_id, other.user_id, seeded.summary) is None
            )

        found = await memory_store.get_many(tx, ana.tenant_id, seeded.memories)
        assert sorted(m.id for m in found) == mine
        found = await memory_store.get_many(tx, ana.tenant_id, seeded.memories, user_id=ana.user_id)
        assert sorted(m.id for m in found) == mine
        locked = await memory_store.lock_live(tx, ana.tenant_id, ana.user_id, seeded.memories)
        assert sorted(m.id for m in locked) == mine
        summary = await summary_store.get(tx, ana.tenant_id, ana.user_id, seeded.summary)
        assert summary is not None
        assert summary.content == "ana's day"
