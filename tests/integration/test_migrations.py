"""Migrations run forward and back on both databases, and match the models."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
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
