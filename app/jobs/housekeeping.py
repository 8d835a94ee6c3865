"""Housekeeping of the job table itself: succeeded jobs are purged after a while."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from app.jobs.registry import JobContext, Registry
from app.services.users import ERASE_USER
from app.stores import jobs as job_store
from app.stores.db import Database

PURGE_FINISHED_JOBS = "purge_finished_jobs"


def register(
    registry: Registry, db: Database, *, keep: timedelta, every: timedelta = timedelta(days=1)
) -> None:
    """Purge succeeded jobs older than `keep`, once per `every`. Failed jobs stay: they are
    there to be seen and re-run."""

    async def purge_finished_jobs(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        # The cutoff comes from the period, not the clock: a re-run deletes the same set.
        cutoff = datetime.fromisoformat(payload["period"]) - keep
        async with db.transaction() as tx:
            # Erasure receipts stay: the proof that a user was erased (docs/privacy.md).
            deleted = await job_store.purge_succeeded(
                tx, finished_before=cutoff, keep_kinds=(ERASE_USER,)
            )
        return {"deleted": deleted, "finished_before": cutoff.isoformat()}

    registry.add(PURGE_FINISHED_JOBS, purge_finished_jobs)
    registry.every(every, PURGE_FINISHED_JOBS)
