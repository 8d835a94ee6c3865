"""Background jobs as a caller sees them: look one up, enqueue one, re-run a failed one;
and the housekeeping of the job table itself (`purge_finished_jobs`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from app.errors import JobNotFailed, JobNotFound
from app.schemas.jobs import JobOut
from app.services.job_kinds import JobContext, JobKind, Periodic
from app.stores import jobs as job_store
from app.stores.db import Database
from app.stores.models import Job

PURGE_FINISHED_JOBS = "purge_finished_jobs"


def job_out(row: Job) -> JobOut:
    return JobOut(
        id=row.id,
        kind=row.kind,
        key=row.key,
        state=row.state,
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        last_error=row.last_error,
        result=row.result,
        due_at=row.due_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
        finished_at=row.finished_at,
    )


class JobService:
    def __init__(self, db: Database, *, max_attempts: int) -> None:
        self.db = db
        self.max_attempts = max_attempts

    async def get(self, tenant_id: str, job_id: uuid.UUID) -> JobOut:
        async with self.db.read() as tx:
            row = await job_store.get(tx, tenant_id, job_id)
        if row is None:
            raise JobNotFound(job_id)
        return job_out(row)

    async def enqueue(
        self,
        tenant_id: str,
        kind: str,
        key: str,
        payload: dict[str, Any],
        *,
        due_at: datetime | None = None,
        max_attempts: int | None = None,
    ) -> JobOut:
        """The job of this (kind, key), queued if new; an existing one is returned as it is,
        so a caller that retries an enqueue gets the same job back."""
        now = datetime.now(UTC)
        async with self.db.transaction() as tx:
            row, _ = await job_store.enqueue(
                tx,
                tenant_id=tenant_id,
                kind=kind,
                key=key,
                payload=payload,
                due_at=due_at or now,
                max_attempts=max_attempts or self.max_attempts,
                now=now,
            )
        return job_out(row)

    async def rerun(self, tenant_id: str, job_id: uuid.UUID) -> JobOut:
        """Queue a failed job again, with a fresh set of attempts."""
        async with self.db.transaction() as tx:
            row = await job_store.rerun(
                tx, tenant_id=tenant_id, job_id=job_id, now=datetime.now(UTC)
            )
            current = row or await job_store.get(tx, tenant_id, job_id)
        if current is None:
            raise JobNotFound(job_id)
        if row is None:
            raise JobNotFailed(job_id, current.state)
        return job_out(row)

    def purge_job(
        self, *, keep: timedelta, keep_kinds: Sequence[str], every: timedelta = timedelta(days=1)
    ) -> JobKind[Periodic]:
        """`purge_finished_jobs`: succeeded jobs older than `keep` are deleted, once per
        `every`, except those of `keep_kinds`. Failed jobs stay: they are there to be seen
        and re-run."""

        async def purge(ctx: JobContext, payload: Periodic) -> dict[str, Any]:
            # The cutoff comes from the period, not the clock: a re-run deletes the same set.
            cutoff = payload.period - keep
            deleted = await self.purge_succeeded(finished_before=cutoff, keep_kinds=keep_kinds)
            return {"deleted": deleted, "finished_before": cutoff.isoformat()}

        return JobKind(PURGE_FINISHED_JOBS, Periodic, purge, every=every)

    async def purge_succeeded(self, *, finished_before: datetime, keep_kinds: Sequence[str]) -> int:
        async with self.db.transaction() as tx:
            return await job_store.purge_succeeded(
                tx, finished_before=finished_before, keep_kinds=tuple(keep_kinds)
            )
