"""A write cancelled in the middle of a statement on SQLite (embedded mode) must not keep
the database's write lock: a job cancelled when its lease is lost, a reinforcement flush
cancelled at shutdown. Before `_collect_soon` (app/stores/db.py), every later write of the
process waited out SQLite's busy time-out (30 s) and failed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import sqlalchemy as sa

from app.stores.db import Database, create_engine

# A statement that runs for a while in the driver's thread (a few hundred ms here).
SLOW = sa.text(
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) "
    "SELECT count(*) FROM c"
)


async def test_a_write_cancelled_mid_statement_leaves_the_next_write_free(tmp_path: Path) -> None:
    db = Database(create_engine(f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"))
    try:
        async with db.transaction() as tx:
            await tx.execute(sa.text("CREATE TABLE t (x INTEGER)"))

        started = asyncio.Event()

        async def write_then_slow_read() -> None:
            async with db.transaction() as tx:
                await tx.execute(sa.text("INSERT INTO t VALUES (1)"))  # holds the write lock
                started.set()
                await tx.execute(SLOW)

        for _ in range(3):
            task = asyncio.create_task(write_then_slow_read())
            await started.wait()
            await asyncio.sleep(0.02)  # inside the slow statement
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            started.clear()

            began = time.perf_counter()
            async with db.transaction() as tx:
                await tx.execute(sa.text("INSERT INTO t VALUES (2)"))
            assert time.perf_counter() - began < 10, "the next write waited for a lock"

        async with db.read() as tx:
            rows = (await tx.execute(sa.text("SELECT x FROM t"))).scalars().all()
        assert rows == [2, 2, 2]  # the cancelled writes rolled back, the others committed
    finally:
        await db.close()
