"""Embedded SQLite: the process's write transactions take turns on one lock
(app/stores/db.py), in the order they asked, released whatever the body did; a write that
waits too long is a retryable 503, as SQLite's own busy time-out was. Writes in one hop
(app/stores/one_hop.py) take the same turns."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from app.errors import DatabaseUnavailable
from app.stores import db as db_module
from app.stores.db import Database, create_engine
from app.stores.one_hop import Unwritten


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncIterator[Database]:
    dsn = f"sqlite+aiosqlite:///{tmp_path}/writer.db"
    db = Database(create_engine(dsn), create_engine(dsn, readonly=True))
    async with db.transaction() as tx:
        await tx.execute(sa.text("CREATE TABLE turns (n INTEGER)"))
    yield db
    await db.close()


async def test_writers_take_turns_in_the_order_they_asked(sqlite: Database) -> None:
    order: list[str] = []
    first_in = asyncio.Event()
    release_first = asyncio.Event()

    async def first() -> None:
        async with sqlite.transaction() as tx:
            await tx.execute(sa.text("INSERT INTO turns VALUES (1)"))
            first_in.set()
            await release_first.wait()
            order.append("first")

    async def later(name: str, n: int) -> None:
        async with sqlite.transaction() as tx:
            await tx.execute(sa.text(f"INSERT INTO turns VALUES ({n})"))
            order.append(name)

    holder = asyncio.create_task(first())
    await first_in.wait()
    waiting = [asyncio.create_task(later("second", 2))]
    await asyncio.sleep(0)  # the second asks before the third
    waiting.append(asyncio.create_task(later("third", 3)))
    await asyncio.sleep(0.05)
    assert order == []  # both wait for the first's commit
    async with sqlite.read() as tx:  # reads never wait for a writer
        assert (await tx.execute(sa.text("SELECT count(*) FROM turns"))).scalar_one() == 0
    release_first.set()
    await asyncio.gather(holder, *waiting)
    assert order == ["first", "second", "third"]
    async with sqlite.read() as tx:
        assert (await tx.execute(sa.text("SELECT count(*) FROM turns"))).scalar_one() == 3


async def test_the_turn_passes_on_after_a_failed_body(sqlite: Database) -> None:
    async def failing() -> None:
        async with sqlite.transaction() as tx:
            await tx.execute(sa.text("INSERT INTO turns VALUES (1)"))
            raise RuntimeError("the body failed")

    with pytest.raises(RuntimeError):
        await failing()
    async with sqlite.transaction() as tx:
        await tx.execute(sa.text("INSERT INTO turns VALUES (2)"))
    async with sqlite.read() as tx:
        rows = (await tx.execute(sa.text("SELECT n FROM turns"))).scalars().all()
    assert list(rows) == [2]


async def test_a_writer_that_waits_too_long_is_unavailable(
    sqlite: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_module, "WRITER_WAIT_SECONDS", 0.2)
    holding = asyncio.Event()
    done = asyncio.Event()

    async def hold() -> None:
        async with sqlite.transaction() as tx:
            await tx.execute(sa.text("INSERT INTO turns VALUES (1)"))
            holding.set()
            await done.wait()

    holder = asyncio.create_task(hold())
    await holding.wait()

    async def second() -> None:
        async with sqlite.transaction() as tx:
            await tx.execute(sa.text("INSERT INTO turns VALUES (2)"))

    with pytest.raises(DatabaseUnavailable):
        await second()
    done.set()
    await holder
    await second()  # the lock was not left taken by the one that gave up
    async with sqlite.read() as tx:
        rows = (await tx.execute(sa.text("SELECT n FROM turns ORDER BY n"))).scalars().all()
    assert list(rows) == [1, 2]


async def test_a_write_in_one_hop_commits_or_leaves_nothing(sqlite: Database) -> None:
    def insert(n: int, then: type[BaseException] | None = None) -> Callable[[Any], int]:
        def work(conn: Any) -> int:
            conn.execute("INSERT INTO turns VALUES (?)", (n,))
            if then is not None:
                raise then
            return n

        return work

    assert sqlite.writes_in_one
    assert await sqlite.write_in_one(insert(1)) == 1
    assert await sqlite.write_in_one(insert(2, Unwritten)) is None
    with pytest.raises(ZeroDivisionError):
        await sqlite.write_in_one(insert(3, ZeroDivisionError))
    async with sqlite.read() as tx:
        rows = (await tx.execute(sa.text("SELECT n FROM turns"))).scalars().all()
    assert rows == [1]


async def test_a_cancelled_write_in_one_hop_keeps_the_writers_turn_until_it_is_done(
    sqlite: Database,
) -> None:
    """The caller may stop waiting; the next writer still begins only after the work has
    committed, and is handed the turn then (not left to SQLite's busy handler)."""
    started, go_on = threading.Event(), threading.Event()

    def slow(conn: Any) -> None:
        started.set()
        go_on.wait(10)
        conn.execute("INSERT INTO turns VALUES (1)")

    caller = asyncio.create_task(sqlite.write_in_one(slow))
    assert await asyncio.to_thread(started.wait, 10)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    # Held still: the next writer waits on the lock, not in SQLite's busy handler's sleeps.
    assert sqlite._writer is not None
    assert sqlite._writer.locked()

    async def after() -> int:
        async with sqlite.transaction() as tx:
            n = (await tx.execute(sa.text("SELECT count(*) FROM turns"))).scalar_one()
            await tx.execute(sa.text("INSERT INTO turns VALUES (2)"))
            return int(n)

    next_writer = asyncio.create_task(after())
    await asyncio.sleep(0.1)
    assert not next_writer.done()  # the cancelled work still holds the turn
    go_on.set()
    assert await next_writer == 1  # it began after the first's commit
    async with sqlite.read() as tx:
        rows = (await tx.execute(sa.text("SELECT n FROM turns ORDER BY n"))).scalars().all()
    assert rows == [1, 2]


async def test_an_in_memory_database_has_no_one_hop_writer() -> None:
    db = Database(create_engine("sqlite+aiosqlite:///:memory:"))
    try:
        assert not db.writes_in_one
        with pytest.raises(RuntimeError):
            await db.write_in_one(lambda conn: None)
    finally:
        await db.close()


async def test_a_commit_that_fails_leaves_no_transaction_open(sqlite: Database) -> None:
    """A COMMIT refused (here a deferred foreign key; busy or a full disk alike) is rolled
    back: the connection keeps no write lock, and writers on both paths go on."""
    async with sqlite.transaction() as tx:
        await tx.execute(sa.text("CREATE TABLE parent (id INTEGER PRIMARY KEY)"))
        await tx.execute(sa.text("CREATE TABLE child (p INTEGER REFERENCES parent (id))"))

    def orphan(conn: Any) -> None:
        conn.execute("PRAGMA defer_foreign_keys=ON")
        conn.execute("INSERT INTO child VALUES (7)")  # refused only at the commit

    with pytest.raises(sqlite3.IntegrityError):
        await sqlite.write_in_one(orphan)
    assert await sqlite.write_in_one(lambda conn: conn.execute("INSERT INTO turns VALUES (1)"))
    async with asyncio.timeout(5):  # not SQLite's 30 s busy wait behind a held lock
        async with sqlite.transaction() as tx:
            await tx.execute(sa.text("INSERT INTO turns VALUES (2)"))
    async with sqlite.read() as tx:
        assert (await tx.execute(sa.text("SELECT count(*) FROM child"))).scalar_one() == 0
        assert (await tx.execute(sa.text("SELECT count(*) FROM turns"))).scalar_one() == 2


async def test_the_worker_threads_database_does_not_close_the_shared_writer(
    sqlite: Database,
) -> None:
    """The worker's `sibling` shares the one-hop writer; its close (the worker ending) must
    not take the thread and connection from the api's writes."""
    threads: list[threading.Thread] = []

    def note(conn: Any) -> int:
        threads.append(threading.current_thread())  # the object: an ident may be reused
        return int(conn.execute("SELECT 1").fetchone()[0])

    await sqlite.write_in_one(note)
    sibling = sqlite.sibling(create_engine(str(sqlite.engine.url)))
    await sibling.write_in_one(note)
    await sibling.close()
    await sqlite.write_in_one(note)
    assert all(t is threads[0] for t in threads), threads


async def test_the_writers_turn_passes_on_when_the_callers_loop_is_gone(
    sqlite: Database,
) -> None:
    """The turn is let go on the writer's thread when the work ends: not on the caller's
    loop, which may have closed meanwhile (a cancelled caller whose loop then ended)."""
    started, go_on = threading.Event(), threading.Event()

    def slow(conn: Any) -> None:
        started.set()
        go_on.wait(10)
        conn.execute("INSERT INTO turns VALUES (1)")

    async def caller_then_gone() -> None:
        task = asyncio.create_task(sqlite.write_in_one(slow))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    await asyncio.to_thread(asyncio.run, caller_then_gone())  # that loop is closed now
    go_on.set()
    async with asyncio.timeout(5):
        async with sqlite.transaction() as tx:
            await tx.execute(sa.text("INSERT INTO turns VALUES (2)"))
    async with sqlite.read() as tx:
        assert (await tx.execute(sa.text("SELECT count(*) FROM turns"))).scalar_one() == 2
