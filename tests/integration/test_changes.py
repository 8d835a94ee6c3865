"""The write watch (app/stores/changes.py) on the stores' real statements, committed to a
real database of each kind: which users a commit announces, and that what context cannot
show (promotion's turns, reinforcement's counts, a user first seen) announces nothing."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from app.core.reinforcement import Use
from app.stores import memories as memory_store
from app.stores import sessions as session_store
from app.stores import summaries as summary_store
from app.stores import users as user_store
from app.stores.changes import EVERYONE, Scope
from app.stores.db import Database, create_engine, migrate
from app.stores.memories import MemoryValues
from app.stores.models import Memory, Summary

NOW = datetime(2026, 3, 4, 12, tzinfo=UTC)
T, U = "tenant-w", "user-w"


@pytest.fixture(params=["sqlite", "postgresql"])
async def db(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    pg_databases: Callable[[], Awaitable[str]],
) -> AsyncIterator[Database]:
    dsn = (
        f"sqlite+aiosqlite:///{tmp_path}/w.db"
        if request.param == "sqlite"
        else await pg_databases()
    )
    await migrate(dsn)
    database = Database(create_engine(dsn))
    yield database
    await database.close()


@pytest.fixture
def announced(db: Database) -> list[set[Scope]]:
    seen: list[set[Scope]] = []

    async def record(scopes: set[Scope]) -> None:
        seen.append(set(scopes))

    db.after_commit(record)
    return seen


def row(memory_type: str, user: str = U, content: str = "x") -> MemoryValues:
    return MemoryValues(
        id=uuid.uuid4(),
        tenant_id=T,
        user_id=user,
        session_id=None,
        sources=[],
        memory_type=memory_type,
        content=content,
        importance=0.5,
        access_count=0,
        last_accessed_at=None,
        strength=1.0,
        pinned=False,
        valid_from=NOW,
        metadata_={},
        content_hash=uuid.uuid4().hex,
        created_at=NOW,
        updated_at=NOW,
    )


async def insert(db: Database, *rows: MemoryValues) -> None:
    async with db.transaction() as tx:
        await session_store.ensure_user(tx, T, U, NOW)
        await memory_store.insert_many(tx, rows)


async def test_promotion_and_reinforcement_announce_nothing(
    db: Database, announced: list[set[Scope]]
) -> None:
    turn = row("episodic")
    await insert(db, turn, row("episodic"))
    async with db.transaction() as tx:
        use = Use(strength=1.5, access_count=3, last_accessed_at=NOW)
        await memory_store.save_use(tx, T, U, {turn["id"]: use})
    assert announced == []


async def test_a_fact_inserted_edited_or_deleted_announces_its_user(
    db: Database, announced: list[set[Scope]]
) -> None:
    fact = row("semantic")
    await insert(db, row("episodic", user="someone-else"), fact)
    assert announced == [{(T, U)}]  # the fact's user, not the episodic turn's
    async with db.transaction() as tx:
        await memory_store.update_fields(tx, T, U, fact["id"], {"importance": 0.9})
    async with db.transaction() as tx:
        await memory_store.soft_delete(tx, T, U, fact["id"], NOW)
    assert announced[1:] == [{(T, U)}, {(T, U)}]


async def test_profile_and_summaries_announce_their_user(
    db: Database, announced: list[set[Scope]]
) -> None:
    async with db.transaction() as tx:
        await session_store.ensure_user(tx, T, U, NOW)  # a user first seen: nothing to show
    assert announced == []
    async with db.transaction() as tx:
        await user_store.save_profile(tx, T, U, {"city": "Porto"})
    async with db.transaction() as tx:
        summary = await summary_store.upsert(
            tx,
            summary_store.SummaryValues(
                id=uuid.uuid4(),
                tenant_id=T,
                user_id=U,
                level="daily",
                period_start=NOW,
                period_end=NOW,
                timezone="UTC",
                content="A day.",
                sources=[],
                source_hash="h",
                tokens=2,
                method="extractive",
                llm_usage=None,
                created_at=NOW,
                updated_at=NOW,
            ),
        )
    async with db.transaction() as tx:  # through the ORM's flush
        found = await tx.get(Summary, summary.id)
        assert found is not None
        found.content = "A better day."
    async with db.transaction() as tx:
        await summary_store.delete_ids(tx, T, U, [summary.id])
    assert announced == [{(T, U)}] * 4


async def test_what_cannot_be_placed_is_announced_to_everyone(
    db: Database, announced: list[set[Scope]]
) -> None:
    fact = row("procedural")
    await insert(db, fact)
    async with db.transaction() as tx:  # no user in its WHERE clause
        await tx.execute(sa.update(Memory).where(Memory.id == fact["id"]).values(content="y"))
    async with db.transaction() as tx:
        await tx.execute(sa.text("UPDATE memories SET importance = 0.1 WHERE tenant_id = 'x'"))
    assert announced[1:] == [{EVERYONE}, {EVERYONE}]


async def test_a_rolled_back_write_announces_nothing(
    db: Database, announced: list[set[Scope]]
) -> None:
    async def failing() -> None:
        async with db.transaction() as tx:
            await session_store.ensure_user(tx, T, U, NOW)
            await user_store.save_profile(tx, T, U, {"city": "Porto"})
            raise RuntimeError("the body failed")

    with pytest.raises(RuntimeError):
        await failing()
    await insert(db, row("episodic"))  # the next transaction starts clean
    assert announced == []
