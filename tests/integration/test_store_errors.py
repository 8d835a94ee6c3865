"""Stores turn their drivers' failures into the service's errors at their boundary: real
outages (a closed port, a missing database, a statement timeout), no mocks."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from redis.asyncio import Redis
from sqlalchemy.exc import ProgrammingError

from app.errors import BufferUnavailable, DatabaseUnavailable
from app.stores.buffer import Buffer
from app.stores.db import Database, create_engine
from tests.conftest import PG_ADMIN_DSN, full_settings


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # closed again: a connection is refused


@pytest.fixture
async def pg(pg_databases: Callable[[], Awaitable[str]]) -> AsyncIterator[Database]:
    """A fresh database with one table, `t`."""
    dsn = await pg_databases()
    conn = await asyncpg.connect(f"{PG_ADMIN_DSN.rsplit('/', 1)[0]}/{dsn.rsplit('/', 1)[1]}")
    try:
        await conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    finally:
        await conn.close()
    db = Database(create_engine(dsn))
    yield db
    await db.close()


async def _ids(db: Database) -> list[int]:
    async with db.read() as tx:
        return list((await tx.execute(sa.text("SELECT id FROM t ORDER BY id"))).scalars())


async def _run(db: Database, *steps: str | Exception) -> None:
    """One transaction of `steps`: SQL to execute, or an error to raise in the body."""
    async with db.transaction() as tx:
        for step in steps:
            if isinstance(step, Exception):
                raise step
            await tx.execute(sa.text(step))


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql+asyncpg://postgres@127.0.0.1:{port}/x",  # refused: a bare OSError
        "postgresql+asyncpg://postgres@no-such-host.invalid/x",  # name resolution
        PG_ADMIN_DSN.replace("postgresql://", "postgresql+asyncpg://").rsplit("/", 1)[0]
        + "/strata_no_such_database",  # the server answers, the database is missing
        "sqlite+aiosqlite:///{tmp}",  # a directory where the file should be
    ],
    ids=["refused", "unknown host", "missing database", "sqlite cannot open"],
)
async def test_an_unreachable_database_is_database_unavailable(dsn: str, tmp_path: Path) -> None:
    db = Database(create_engine(dsn.format(port=_closed_port(), tmp=tmp_path)))
    try:
        with pytest.raises(DatabaseUnavailable):
            async with db.transaction() as tx:
                await tx.execute(sa.text("SELECT 1"))
        with pytest.raises(DatabaseUnavailable):
            async with db.read() as tx:
                await tx.execute(sa.text("SELECT 1"))
    finally:
        await db.close()


async def test_a_statement_timeout_is_unavailable_and_rolls_back(pg: Database) -> None:
    timeout = ("SET LOCAL statement_timeout = 10", "SELECT pg_sleep(1)")
    with pytest.raises(DatabaseUnavailable) as raised:
        await _run(pg, "INSERT INTO t VALUES (1)", *timeout)
    assert getattr(raised.value.__cause__, "orig", None) is not None  # the driver's, kept
    assert await _ids(pg) == []


async def test_a_statement_refused_for_our_bug_stays_unexpected(pg: Database) -> None:
    with pytest.raises(ProgrammingError):
        await _run(pg, "INSERT INTO t VALUES (1)", "SELECT no_such_column FROM t")
    assert await _ids(pg) == []


@pytest.mark.parametrize(
    "error",
    [DatabaseUnavailable("a nested store call failed"), OSError("our own file, not the driver")],
    ids=["raised in the body", "not the driver's"],
)
async def test_errors_of_the_body_roll_back_and_pass_unchanged(
    pg: Database, error: Exception
) -> None:
    with pytest.raises(type(error)) as raised:
        await _run(pg, "INSERT INTO t VALUES (1)", error)
    assert raised.value is error
    assert await _ids(pg) == []
    await _run(pg, "INSERT INTO t VALUES (2)")  # the pool is fine afterwards
    assert await _ids(pg) == [2]


async def test_a_commit_refused_as_a_serialisation_failure_is_unavailable(pg: Database) -> None:
    """Write skew between two serialisable transactions: the second to commit is refused
    (SQLSTATE 40001) at COMMIT, which a retry cures. Driven by hand to interleave them."""
    first, second = pg.transaction(), pg.transaction()
    one, two = await first.__aenter__(), await second.__aenter__()
    for tx, other in ((one, 2), (two, 1)):
        await tx.execute(sa.text("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"))
        await tx.execute(sa.text(f"SELECT count(*) FROM t WHERE id = {other}"))
    await one.execute(sa.text("INSERT INTO t VALUES (1)"))
    await two.execute(sa.text("INSERT INTO t VALUES (2)"))
    await first.__aexit__(None, None, None)
    with pytest.raises(DatabaseUnavailable):
        await second.__aexit__(None, None, None)
    assert await _ids(pg) == [1]


async def test_an_ingest_behind_a_held_session_lock_gives_up_as_unavailable(
    pg_databases: Callable[[], Awaitable[str]], start_app: Callable[..., Any]
) -> None:
    """A transaction that hangs while it holds a session's row (a store call that never
    answers, say) must not hold every ingest to that session with it: after
    `db_lock_timeout_seconds` the request answers a retryable 503 and stores nothing."""
    settings = full_settings(await pg_databases(), db_lock_timeout_seconds=0.3)
    async with start_app(settings) as running:
        url = "/v1/sessions/locked/messages"
        first = {"user_id": "u", "messages": [{"role": "user", "content": "one"}]}
        assert (await running.client.post(url, json=first)).status_code == 202
        second = {"user_id": "u", "messages": [{"role": "user", "content": "two"}]}
        async with running.resources.db.transaction() as holder:
            await holder.execute(sa.text("SELECT 1 FROM sessions WHERE id = 'locked' FOR UPDATE"))
            blocked = await running.client.post(url, json=second)
        assert blocked.status_code == 503
        assert blocked.json()["code"] == "database_unavailable"
        state = await running.client.get("/v1/sessions/locked", params={"user_id": "u"})
        assert state.json()["last_seq"] == 1
        # Once the lock is free, the retry goes through.
        retried = await running.client.post(url, json=second)
        assert (retried.status_code, retried.json()["last_seq"]) == (202, 2)


async def test_every_buffer_call_on_a_closed_port_is_buffer_unavailable() -> None:
    # As the service opens it (`from_url`: no retries with back-off, unlike `Redis()`).
    redis = Redis.from_url(f"redis://127.0.0.1:{_closed_port()}/0")
    buffer = Buffer(redis, window=10, ttl_seconds=60)  # no breaker: every call tries Redis
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: buffer.push("t", "u", "s", [{"seq": 1}], wake=True),
        lambda: buffer.replace("t", "u", "s", [{"seq": 1}]),
        lambda: buffer.recent("t", "u", "s", 5),
        lambda: buffer.drop("t", "u", "s"),
        lambda: buffer.read_scratchpad("t", "u", "s"),
        lambda: buffer.write_scratchpad("t", "u", "s", b"{}"),
        lambda: buffer.drop_scratchpad("t", "u", "s"),
        buffer.ping,
    ]
    try:
        for call in calls:
            with pytest.raises(BufferUnavailable):
                await call()
    finally:
        await buffer.close()


async def test_a_redis_outage_degrades_to_the_log(
    pg_databases: Callable[[], Awaitable[str]], start_app: Any, tmp_path: Path
) -> None:
    """No request path needs the buffer but the scratchpad's own: ingest, context and
    deletion answer from the log (each catches `BufferUnavailable`; context packs without
    the working memory), the scratchpad answers 503, and readiness reports the outage."""
    settings = full_settings(
        await pg_databases(),
        redis_url=f"redis://127.0.0.1:{_closed_port()}/0",
        worker_in_process=False,
    )
    async with start_app(settings) as app:
        client = app.client
        params = {"user_id": "u"}
        assert (await client.put("/v1/sessions/s", json=params)).status_code == 201
        posted = await client.post(
            "/v1/sessions/s/messages",
            json={"user_id": "u", "messages": [{"role": "user", "content": "hello"}]},
        )
        assert posted.status_code == 202, posted.text
        context = await client.post("/v1/sessions/s/context", json={"user_id": "u"})
        assert context.status_code == 200, context.text
        recent = context.json()["sections"]["recent_messages"]
        assert [m["content"] for m in recent] == ["hello"]
        assert context.json()["sections"]["working_memory"] == {}
        pad = await client.put("/v1/sessions/s/scratchpad", json={"user_id": "u", "data": {}})
        assert pad.status_code == 503
        assert pad.json()["code"] == "buffer_unavailable"
        pad = await client.get("/v1/sessions/s/scratchpad", params=params)
        assert pad.status_code == 503
        assert pad.json()["code"] == "buffer_unavailable"
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["buffer"]["ok"] is False
        deleted = await client.delete("/v1/sessions/s", params=params)
        assert deleted.status_code == 200, deleted.text
