"""Promotion's rows bound ahead for SQLite (`memories.bind_for_sqlite`, `insert_bound`):
written by the driver, they must read back exactly as the ORM's statement writes them, and
a replayed batch must insert (and log) nothing twice."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.core.audit import AuditEvent
from app.stores import memories
from app.stores.db import Database, create_engine, migrate


@pytest.fixture
async def sqlite_db(tmp_path: Path) -> AsyncIterator[tuple[Database, Path]]:
    path = tmp_path / "rows.db"
    dsn = f"sqlite+aiosqlite:///{path}"
    await migrate(dsn)
    db = Database(create_engine(dsn), create_engine(dsn, readonly=True))
    yield db, path
    await db.close()


def row(n: int, memory_type: str = "episodic", user: str = "ana") -> memories.MemoryValues:
    # On the second exactly: a datetime bound as Python prints it would lose ".000000".
    at = datetime(2024, 5, 1, 8, 0, 0, tzinfo=UTC)
    return memories.MemoryValues(
        id=uuid.uuid4(),
        tenant_id="t1",
        user_id=user,
        session_id="s1",
        memory_type=memory_type,
        content=f"ana: 我搬到了里斯本 {n}",
        importance=0.5,
        access_count=0,
        last_accessed_at=None,
        strength=1.0,
        pinned=False,
        valid_from=at,
        sources=[{"message_id": f"m{n}", "seq": n, "session_id": "s1"}],
        metadata_={"role": "user", "name": "Ana", "n": [1, None]},
        content_hash=f"h{n}",
        created_at=at,
        updated_at=at,
    )


def created(r: memories.MemoryValues) -> AuditEvent:
    return AuditEvent(
        tenant_id=r["tenant_id"],
        user_id=r["user_id"],
        memory_id=r["id"],
        event="created",
        old=None,
        new={"content": r["content"]},
        reason="promoted",
        at=r["created_at"],
    )


def stored(path: Path, table: str, key: str, value: str) -> tuple[object, ...]:
    with sqlite3.connect(path) as conn:
        got = conn.execute(f"SELECT * FROM {table} WHERE {key} = ?", (value,)).fetchone()
    assert got is not None
    return tuple(got)


async def test_rows_bound_ahead_read_back_as_the_orm_writes_them(
    sqlite_db: tuple[Database, Path],
) -> None:
    db, path = sqlite_db
    general, ahead = row(1), row(1)
    async with db.transaction() as tx:
        assert await memories.insert_many(tx, [general]) == {general["id"]}
        await memories.add_events(tx, [created(general)])
    bound = memories.bind_for_sqlite([ahead])
    assert bound is not None
    async with db.transaction() as tx:
        assert await memories.insert_bound(tx, bound) == {ahead["id"]}
        await memories.add_bound_events(tx, memories.bind_events_for_sqlite([created(ahead)]))
    one = stored(path, "memories", "id", general["id"].hex)
    other = stored(path, "memories", "id", ahead["id"].hex)
    assert one[1:] == other[1:]  # every column but the id, as stored text
    event_one = stored(path, "memory_events", "memory_id", general["id"].hex)
    event_other = stored(path, "memory_events", "memory_id", ahead["id"].hex)
    assert event_one[4:] == event_other[4:]  # past the id, tenant, user and memory id


async def test_a_replayed_batch_inserts_only_what_is_new(sqlite_db: tuple[Database, Path]) -> None:
    db, path = sqlite_db
    batch = [row(n) for n in range(3)]
    first = memories.bind_for_sqlite(batch[:2])
    again = memories.bind_for_sqlite(batch)
    assert first is not None
    assert again is not None
    async with db.transaction() as tx:
        assert await memories.insert_bound(tx, first) == {r["id"] for r in batch[:2]}
    async with db.transaction() as tx:
        assert await memories.insert_bound(tx, again) == {batch[2]["id"]}
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone() == (3,)


def test_facts_and_mixed_users_take_the_watched_statement() -> None:
    """A fact's insert can change what context shows: it goes through the statement the
    session watches (app/stores/changes.py), as do rows of two users at once."""
    assert memories.bind_for_sqlite([row(1), row(2, memory_type="semantic")]) is None
    assert memories.bind_for_sqlite([row(1), row(2, user="bo")]) is None
    assert memories.bind_for_sqlite([row(1), row(2)]) is not None
