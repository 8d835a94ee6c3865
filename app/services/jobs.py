"""Background jobs as a caller sees them: look one up, enqueue one, re-run a failed one."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from app.errors import JobNotFailed, JobNotFound
from app.schemas.jobs import JobOut
from app.stores import jobs as job_store
from app.stores.db import Database
from app.stores.models import Job


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
