"""The job runner: claims due jobs under a lease, runs their handlers, records the outcome.

While a handler runs, a heartbeat renews the lease; if the renewal finds the lease gone
(the runner stalled past it and another took the job over), the handler is cancelled. The
outcome is written only under the lease, so the new owner's record is never overwritten.
A runner killed outright leaves its lease to expire: another runner then runs the job again,
which is why handlers must be idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from app.core.backoff import backoff_seconds
from app.jobs.registry import JobContext, Registry
from app.logs import job_id_var
from app.metrics import Metrics
from app.services.job_kinds import InvalidPayload
from app.stores import jobs as job_store
from app.stores.db import Database
from app.stores.models import Job

log = logging.getLogger("strata.jobs")

MAX_ERROR_CHARS = 2000


class JobRunner:
    def __init__(
        self,
        db: Database,
        owner: str,
        registry: Registry,
        *,
        lease_seconds: float,
        poll_seconds: float,
        retry_base_seconds: float,
        retry_max_seconds: float,
        concurrency: int = 1,
        metrics: Metrics | None = None,
    ) -> None:
        self.db = db
        self.metrics = metrics
        self.owner = owner
        self.registry = registry
        self.lease = timedelta(seconds=lease_seconds)
        self.poll_seconds = poll_seconds
        self.retry_base_seconds = retry_base_seconds
        self.retry_max_seconds = retry_max_seconds
        self.concurrency = concurrency

    async def run(self, stop: asyncio.Event) -> None:
        """Run jobs until `stop` is set, `concurrency` at a time. A job in progress when
        `stop` is set runs to its end (or, if the process is killed, to its lease's)."""
        await asyncio.gather(*(self._slot(stop) for _ in range(self.concurrency)))

    async def _slot(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                ran = await self.run_once()
            except Exception:
                log.exception("job pass failed; retrying")
                ran = None
            if ran is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.poll_seconds)

    async def run_once(self) -> uuid.UUID | None:
        """Claim one due job and run it; its id, or None when nothing was due."""
        if not self.registry.handlers:
            return None
        now = datetime.now(UTC)
        # A read first: an idle poll then takes no write lock (on SQLite, the whole file's).
        async with self.db.read() as tx:
            if not await job_store.any_due(tx, kinds=self.registry.kinds, now=now):
                return None
        async with self.db.transaction() as tx:
            claimed = await job_store.claim(
                tx,
                owner=self.owner,
                kinds=self.registry.kinds,
                now=now,
                lease_until=now + self.lease,
                limit=1,
            )
        if not claimed:
            return None
        await self._execute(claimed[0])
        return claimed[0].id

    async def _execute(self, job: Job) -> None:
        """Run a job this runner has claimed, and record how it ended. Every log line
        written meanwhile (the handler's too: its task copies this context) names the job."""
        token = job_id_var.set(str(job.id))
        start = time.perf_counter()
        try:
            outcome = await self._run(job)
            if self.metrics is not None:
                self.metrics.job_seconds.labels(job.kind, outcome).observe(
                    time.perf_counter() - start
                )
        finally:
            job_id_var.reset(token)

    async def _run(self, job: Job) -> str:
        """Run the job and record its outcome: succeeded, failed (this attempt) or lost."""
        ctx = JobContext(job.id, job.tenant_id, job.kind, job.key, job.attempts, job.max_attempts)
        handler = self.registry.handlers[job.kind]
        work = asyncio.ensure_future(handler(ctx, dict(job.payload)))
        lost = asyncio.Event()
        heartbeat = asyncio.create_task(self._heartbeat(job.id, work, lost))
        try:
            result = await work
        except asyncio.CancelledError:
            if not lost.is_set():
                raise  # we are being cancelled ourselves, not the handler for a lost lease
            log.warning("job %s (%s): lease lost; its new owner goes on", job.id, job.kind)
            return "lost"
        except Exception as exc:
            await self._fail(job, exc)
            return "failed"
        finally:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
        async with self.db.transaction() as tx:
            recorded = await job_store.finish(
                tx, job_id=job.id, owner=self.owner, result=result, now=datetime.now(UTC)
            )
        if not recorded:
            log.warning("job %s (%s): lease lost before its result was recorded", job.id, job.kind)
            return "lost"
        return "succeeded"

    async def _heartbeat(
        self, job_id: uuid.UUID, work: asyncio.Future[Any], lost: asyncio.Event
    ) -> None:
        """Renew the lease every third of it; cancel the handler once the lease is gone.
        A failed renewal (the database briefly away) is retried: the lease has slack."""
        interval = self.lease.total_seconds() / 3
        while True:
            await asyncio.sleep(interval)
            now = datetime.now(UTC)
            try:
                async with self.db.transaction() as tx:
                    held = await job_store.renew(
                        tx, job_id=job_id, owner=self.owner, now=now, lease_until=now + self.lease
                    )
            except Exception as exc:
                log.warning("job %s: lease renewal failed (%s); retrying", job_id, exc)
                continue
            if not held:
                lost.set()
                work.cancel()
                return

    async def _fail(self, job: Job, exc: Exception) -> None:
        """Queue the job again after a backoff, or fail it for good on its last attempt
        (or at once when its payload is invalid: a retry would read the same row)."""
        error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
        now = datetime.now(UTC)
        retry_at: datetime | None = None
        if job.attempts < job.max_attempts and not isinstance(exc, InvalidPayload):
            wait = backoff_seconds(
                job.attempts, base=self.retry_base_seconds, cap=self.retry_max_seconds
            )
            retry_at = now + timedelta(seconds=wait)
        async with self.db.transaction() as tx:
            recorded = await job_store.fail(
                tx, job_id=job.id, owner=self.owner, error=error, now=now, retry_at=retry_at
            )
        if not recorded:
            outcome = "its lease was lost, so the new owner's record stands"
        elif retry_at is None:
            outcome = "failed for good"
        else:
            outcome = f"retry at {retry_at.isoformat()}"
        log.warning(
            "job %s (%s) attempt %d/%d raised %s; %s",
            job.id,
            job.kind,
            job.attempts,
            job.max_attempts,
            error,
            outcome,
            exc_info=exc,
        )
