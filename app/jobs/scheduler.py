"""Periodic schedules: each one's job enqueued once per period, by one replica at a time.

Every worker runs a scheduler; for each schedule, the one that holds its leader lease
(`leader_leases`) enqueues the period's job. The job's key is the period, so even two
leaders overlapping (a lease that expired under a stalled process) enqueue it once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from app.jobs.registry import SYSTEM_TENANT, Schedule
from app.stores import jobs as job_store
from app.stores.db import Database

log = logging.getLogger("strata.jobs")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def period_start(now: datetime, every: timedelta) -> datetime:
    """The start of the period of length `every` that `now` falls in, counted from the
    Unix epoch: every replica computes the same periods (daily ones start at 00:00 UTC)."""
    return now - (now - EPOCH) % every


class Scheduler:
    def __init__(
        self,
        db: Database,
        owner: str,
        schedules: Sequence[Schedule],
        *,
        lease_seconds: float,
        tick_seconds: float,
        max_attempts: int,
    ) -> None:
        self.db = db
        self.owner = owner
        self.schedules = list(schedules)
        self.lease = timedelta(seconds=lease_seconds)
        self.tick_seconds = tick_seconds
        self.max_attempts = max_attempts
        self._enqueued: dict[str, datetime] = {}  # schedule → the last period it enqueued

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until `stop`; then hand the leases back, so another replica need not wait
        for them to expire."""
        if not self.schedules:
            return
        try:
            while not stop.is_set():
                try:
                    await self.tick()
                except Exception:
                    log.exception("scheduler tick failed; retrying")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.tick_seconds)
        finally:
            with contextlib.suppress(Exception):
                async with self.db.transaction() as tx:
                    for schedule in self.schedules:
                        await job_store.release_leader(tx, name=schedule.name, owner=self.owner)

    async def tick(self, now: datetime | None = None) -> list[str]:
        """Take or renew each schedule's lease and, where held, enqueue its period's job.
        Returns the names of the schedules whose lease this scheduler holds."""
        now = now or datetime.now(UTC)
        led: list[str] = []
        for schedule in self.schedules:
            period = period_start(now, schedule.every)
            async with self.db.transaction() as tx:
                if not await job_store.acquire_leader(
                    tx, name=schedule.name, owner=self.owner, now=now, until=now + self.lease
                ):
                    continue
                led.append(schedule.name)
                if self._enqueued.get(schedule.name) == period:
                    continue
                job, created = await job_store.enqueue(
                    tx,
                    tenant_id=SYSTEM_TENANT,
                    kind=schedule.kind,
                    key=f"{schedule.name}@{period.isoformat()}",
                    payload={**schedule.payload, "period": period.isoformat()},
                    due_at=period,
                    max_attempts=self.max_attempts,
                    now=now,
                )
            self._enqueued[schedule.name] = period
            if created:
                log.info("schedule %s: job %s for %s", schedule.name, job.id, period.isoformat())
        return led
