"""A job worker process for the kill test (test_job_kill.py): `python -m
tests.integration.job_worker`.

It runs the job side of `app.worker` (`app.jobs.tasks.start`, as `run_worker` does) with
one test-only job kind added, and without promotion: that would load the embedding model
and the term dictionaries, and make each start take seconds the test does not need."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import Any

import sqlalchemy as sa

from app.jobs import tasks as job_tasks
from app.jobs.catalog import build_registry
from app.jobs.registry import Handler, JobContext
from app.services.jobs import JobService
from app.settings import Settings
from app.stores.db import Database, create_engine

SLOW_EFFECT = "test.slow_effect"


def slow_effect(db: Database) -> Handler:
    """Counts every run (so a second run is visible), writes its effect idempotently (keyed
    by the job, as the handler contract asks), then, on the first attempt, sleeps: the
    window in which the test kills the process."""

    async def handler(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        params = {"job_id": str(ctx.job_id), "attempt": ctx.attempt, "pid": os.getpid()}
        async with db.transaction() as tx:
            await tx.execute(
                sa.text(
                    "INSERT INTO kill_test_runs (job_id, attempt, pid) "
                    "VALUES (:job_id, :attempt, :pid)"
                ),
                params,
            )
            await tx.execute(
                sa.text(
                    "INSERT INTO kill_test_effects (job_id, pid) VALUES (:job_id, :pid) "
                    "ON CONFLICT (job_id) DO NOTHING"
                ),
                params,
            )
        if ctx.attempt == 1:
            await asyncio.sleep(payload["sleep_seconds"])
        return {"pid": os.getpid()}

    return handler


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    settings = Settings()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    db = Database(create_engine(settings.database_dsn))
    try:
        registry = build_registry(
            settings, jobs=JobService(db, max_attempts=settings.job_max_attempts)
        )
        registry.add(SLOW_EFFECT, slow_effect(db))
        owner = f"kill-test:{os.getpid()}"
        tasks = job_tasks.start(db, settings, owner, stop, registry)
        logging.getLogger("strata.worker").info("job worker %s started", owner)
        await asyncio.gather(*tasks)
    finally:
        await db.close()


if __name__ == "__main__":
    asyncio.run(main())
