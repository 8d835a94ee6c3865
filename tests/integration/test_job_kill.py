"""The kill test: a worker process SIGKILLed mid-job; a second worker takes the job over once
the lease expires, and the job finishes once, its effect present once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from app.stores import jobs as job_store
from app.stores.db import Database, create_engine, migrate
from app.stores.models import Job
from tests.integration.job_worker import SLOW_EFFECT

ROOT = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 2.0


@pytest.fixture
async def database(
    pg_databases: Callable[[], Awaitable[str]],
) -> AsyncIterator[tuple[str, Database]]:
    dsn = await pg_databases()
    await migrate(dsn)
    db = Database(create_engine(dsn))
    async with db.transaction() as tx:
        # The test handler's tables: its runs, and its (idempotent) effect.
        await tx.execute(sa.text("CREATE TABLE kill_test_runs (job_id text, attempt int, pid int)"))
        await tx.execute(
            sa.text("CREATE TABLE kill_test_effects (job_id text PRIMARY KEY, pid int)")
        )
    yield dsn, db
    await db.close()


@pytest.fixture
def start_worker(
    database: tuple[str, Database], tmp_path: Path
) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """Starts worker processes on the test's database, each logging to its own file."""
    dsn, _ = database
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env.update(
        STRATA_DATABASE_URL=dsn,
        STRATA_JOB_LEASE_SECONDS=str(LEASE_SECONDS),
        STRATA_JOB_POLL_SECONDS="0.1",
        STRATA_DATA_DIR=str(tmp_path),
    )
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> subprocess.Popen[bytes]:
        with (tmp_path / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.job_worker"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def logs(tmp_path: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(tmp_path.glob("*.log")))


async def until(
    what: str, check: Callable[[], Awaitable[bool]], tmp_path: Path, seconds: float = 15
) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, f"{what} did not happen\n{logs(tmp_path)}"
        await asyncio.sleep(0.05)


async def test_a_job_killed_mid_run_is_taken_over_and_finishes_once(
    database: tuple[str, Database],
    start_worker: Callable[[str], subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    _, db = database
    now = datetime.now(UTC)
    async with db.transaction() as tx:
        job, _ = await job_store.enqueue(
            tx,
            tenant_id="default",
            kind=SLOW_EFFECT,
            key="kill-me",
            payload={"sleep_seconds": 120},
            due_at=now,
            max_attempts=3,
            now=now,
        )

    async def runs() -> list[tuple[int, int]]:
        async with db.read() as tx:
            rows = await tx.execute(
                sa.text("SELECT attempt, pid FROM kill_test_runs ORDER BY attempt")
            )
            return [(r.attempt, r.pid) for r in rows]

    async def state() -> Job:
        async with db.read() as tx:
            row = await job_store.get(tx, "default", job.id)
        assert row is not None
        return row

    # Two workers from the start: whichever claims the job is killed mid-run, and the other,
    # polling all along, must wait out the lease before taking the job over.
    workers = {w.pid: w for w in (start_worker("a"), start_worker("b"))}

    async def first_run_started_and_both_up() -> bool:
        return len(await runs()) == 1 and logs(tmp_path).count("job worker") >= 2

    await until("the first run", first_run_started_and_both_up, tmp_path)
    [(_, victim_pid)] = await runs()
    victim = workers.pop(victim_pid)
    [survivor] = workers.values()
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=10) == -signal.SIGKILL
    killed = await state()
    assert (killed.state, killed.attempts, killed.lease_owner is not None) == ("running", 1, True)

    async def succeeded() -> bool:
        return (await state()).state == "succeeded"

    await until("the takeover", succeeded, tmp_path)
    done = await state()
    assert done.attempts == 2
    assert done.result == {"pid": survivor.pid}
    assert await runs() == [(1, victim.pid), (2, survivor.pid)]  # it did run twice...
    async with db.read() as tx:
        effects = (await tx.execute(sa.text("SELECT pid FROM kill_test_effects"))).all()
    assert [e.pid for e in effects] == [victim.pid]  # ...to one visible effect

    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(timeout=15) == 0, logs(tmp_path)
