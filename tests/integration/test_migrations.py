"""Migrations run forward and back on both databases, and match the models."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from app.stores.db import alembic_config
from app.stores.models import Base


async def _tables(dsn: str) -> tuple[set[str], list[object]]:
    engine = create_async_engine(dsn)

    def inspect(conn: Connection) -> tuple[set[str], list[object]]:
        from sqlalchemy import inspect as sa_inspect

        names = set(sa_inspect(conn).get_table_names())
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        return names, diff

    async with engine.connect() as conn:
        result = await conn.run_sync(inspect)
    await engine.dispose()
    return result


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
async def test_upgrade_downgrade_upgrade(
    backend: str, pg_databases: Callable[[], Awaitable[str]], tmp_path: Path
) -> None:
    dsn = (
        await pg_databases() if backend == "postgresql" else f"sqlite+aiosqlite:///{tmp_path}/m.db"
    )
    cfg = alembic_config(dsn)
    await asyncio.to_thread(command.upgrade, cfg, "head")
    names, diff = await _tables(dsn)
    assert {"sessions", "messages", "memories", "memory_events", "users"} <= names
    assert diff == []  # the models and the migrations agree

    await asyncio.to_thread(command.downgrade, cfg, "base")
    names, _ = await _tables(dsn)
    assert names <= {"alembic_version"}

    await asyncio.to_thread(command.upgrade, cfg, "head")
    names, _ = await _tables(dsn)
    assert "memories" in names


async def test_postgresql_knows_a_user_belongs_to_one_tenant(
    pg_databases: Callable[[], Awaitable[str]],
) -> None:
    """Statements by id name tenant and user; functional-dependency statistics keep the
    planner from taking the pair as independent (migration 2026_12_04_owner_statistics)."""
    from sqlalchemy import text

    dsn = await pg_databases()
    await asyncio.to_thread(command.upgrade, alembic_config(dsn), "head")
    engine = create_async_engine(dsn)
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT stxname, stxkind FROM pg_statistic_ext ORDER BY stxname")
        )
        found = {str(row[0]): row[1] for row in rows}
    await engine.dispose()
    assert set(found) >= {"st_memories_owner", "st_summaries_owner"}
    assert all("f" in str(found[name]) for name in ("st_memories_owner", "st_summaries_owner"))


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
async def test_sessions_become_the_users_with_their_data(
    backend: str, pg_databases: Callable[[], Awaitable[str]], tmp_path: Path
) -> None:
    """2026_12_06_user_sessions carries sessions and messages over (their memories' ids
    unchanged: `ids_by_user` false), lets two users share a session id, and refuses to go
    back while they do."""
    from sqlalchemy import text

    dsn = (
        await pg_databases() if backend == "postgresql" else f"sqlite+aiosqlite:///{tmp_path}/u.db"
    )
    cfg = alembic_config(dsn)
    await asyncio.to_thread(command.upgrade, cfg, "2026_12_05_sweep_order")
    engine = create_async_engine(dsn)
    at: object = "2026-06-01 12:00:00"  # SQLite's text; asyncpg's datetime
    if backend == "postgresql":
        at = datetime(2026, 6, 1, 12, tzinfo=UTC)
    session = (
        "INSERT INTO sessions (tenant_id, id, user_id, metadata, last_seq, indexed_seq,"
        " created_at, updated_at) VALUES ('t', 's1', :user, '{}', :n, 0, :at, :at)"
    )
    message = (
        "INSERT INTO messages (tenant_id, session_id, seq, client_id, user_id, role, content,"
        " metadata, created_at, received_at)"
        " VALUES ('t', 's1', :seq, :cid, :user, 'user', :content, '{}', :at, :at)"
    )
    async with engine.begin() as conn:
        await conn.execute(text(session), {"user": "ana", "n": 2, "at": at})
        for seq in (1, 2):
            params = {"seq": seq, "cid": f"m{seq}", "user": "ana", "content": f"ana {seq}"}
            await conn.execute(text(message), {**params, "at": at})
    await engine.dispose()

    await asyncio.to_thread(command.upgrade, cfg, "head")
    engine = create_async_engine(dsn)
    async with engine.begin() as conn:
        rows = await conn.execute(text("SELECT user_id, id, ids_by_user FROM sessions"))
        assert [tuple(r) for r in rows] == [("ana", "s1", False)]
        rows = await conn.execute(text("SELECT user_id, seq, content FROM messages ORDER BY seq"))
        assert [tuple(r) for r in rows] == [("ana", 1, "ana 1"), ("ana", 2, "ana 2")]
        # Bob's own "s1", with a message of the same client id.
        await conn.execute(text(session), {"user": "bob", "n": 1, "at": at})
        params = {"seq": 1, "cid": "m1", "user": "bob", "content": "bob 1"}
        await conn.execute(text(message), {**params, "at": at})
    await engine.dispose()

    with pytest.raises(RuntimeError, match="more than one user"):
        await asyncio.to_thread(command.downgrade, cfg, "2026_12_05_sweep_order")
    engine = create_async_engine(dsn)
    async with engine.begin() as conn:
        await conn.execute(text("DELETE FROM messages WHERE user_id = 'bob'"))
        await conn.execute(text("DELETE FROM sessions WHERE user_id = 'bob'"))
    await engine.dispose()
    await asyncio.to_thread(command.downgrade, cfg, "2026_12_05_sweep_order")
    engine = create_async_engine(dsn)
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT user_id, seq FROM messages ORDER BY seq"))
        assert [tuple(r) for r in rows] == [("ana", 1), ("ana", 2)]
    await engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
async def test_users_from_before_keys_get_one_not_sealed_from_start(
    backend: str, pg_databases: Callable[[], Awaitable[str]], tmp_path: Path
) -> None:
    """2026_12_07_user_keys gives every user a key of their own, marked as made after their
    first points (which the Qdrant server holds plain): an erasure's receipt must not say
    their text there is unreadable (docs/privacy.md, "What stays on disk")."""
    from sqlalchemy import text

    dsn = (
        await pg_databases() if backend == "postgresql" else f"sqlite+aiosqlite:///{tmp_path}/k.db"
    )
    cfg = alembic_config(dsn)
    await asyncio.to_thread(command.upgrade, cfg, "2026_12_06_user_sessions")
    at: object = "2026-06-01 12:00:00"  # SQLite's text; asyncpg's datetime
    if backend == "postgresql":
        at = datetime(2026, 6, 1, 12, tzinfo=UTC)
    user = (
        "INSERT INTO users (tenant_id, id, profile, max_access_count, created_at)"
        " VALUES (:tenant, :id, '{}', 0, :at)"
    )
    engine = create_async_engine(dsn)
    async with engine.begin() as conn:
        for tenant, uid in (("t", "ana"), ("t", "bob"), ("u", "ana")):
            await conn.execute(text(user), {"tenant": tenant, "id": uid, "at": at})
    await engine.dispose()

    await asyncio.to_thread(command.upgrade, cfg, "head")
    engine = create_async_engine(dsn)
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text("SELECT tenant_id, user_id, key, sealed_from_start FROM user_keys")
            )
        ).all()
    await engine.dispose()
    assert sorted((r[0], r[1], bool(r[3])) for r in rows) == [
        ("t", "ana", False),
        ("t", "bob", False),
        ("u", "ana", False),
    ]
    assert all(len(r[2]) == 32 for r in rows)
    assert len({bytes(r[2]) for r in rows}) == 3  # each a key of its own
