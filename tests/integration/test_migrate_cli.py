"""`python -m app.migrate`: the schema once, before many processes start without migrating."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import create_async_engine

from app.stores.db import alembic_config
from tests.conftest import full_settings, turn

ROOT = Path(__file__).resolve().parents[2]


def _head() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


def _migrate(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    return subprocess.run(
        [sys.executable, "-m", "app.migrate", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _version(dsn: str) -> str | None:
    engine = create_async_engine(dsn)
    try:
        async with engine.connect() as conn:
            return (await conn.execute(sa.text("SELECT version_num FROM alembic_version"))).scalar()
    finally:
        await engine.dispose()


async def test_migrate_then_an_app_that_does_not_migrate_serves(
    pg_databases: Callable[[], Awaitable[str]],
    redis_client: Redis,
    start_app: Callable[[Any], Any],
) -> None:
    dsn = await pg_databases()
    done = _migrate({"STRATA_DATABASE_URL": dsn})
    assert done.returncode == 0, done.stderr
    assert await _version(dsn) == _head()
    # Again: a no-op, so every deploy may run it.
    assert _migrate({"STRATA_DATABASE_URL": dsn}).returncode == 0

    async with start_app(full_settings(dsn, auto_migrate=False)) as running:
        resp = await running.client.post(
            "/v1/sessions/cli/messages",
            json={"user_id": "u", "messages": [turn("hello")], "wait": True},
        )
        assert resp.status_code == 200


async def test_migrate_to_a_revision_and_onwards_on_sqlite(tmp_path: Path) -> None:
    env = {"STRATA_DATA_DIR": str(tmp_path)}
    dsn = f"sqlite+aiosqlite:///{tmp_path}/strata.db"
    assert _migrate(env, "2026_11_29_initial").returncode == 0
    assert await _version(dsn) == "2026_11_29_initial"
    assert _migrate(env).returncode == 0
    assert await _version(dsn) == _head()


@pytest.mark.parametrize("args", [["no_such_revision"], ["--nope"]])
def test_a_bad_revision_or_flag_fails(tmp_path: Path, args: list[str]) -> None:
    done = _migrate({"STRATA_DATA_DIR": str(tmp_path)}, *args)
    assert done.returncode != 0
