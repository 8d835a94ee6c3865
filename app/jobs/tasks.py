"""The job runner and the periodic scheduler as a worker runs them: two tasks, built from
the settings, that end when `stop` is set."""

from __future__ import annotations

import asyncio

from app.jobs.registry import Registry
from app.jobs.runner import JobRunner
from app.jobs.scheduler import Scheduler
from app.metrics import Metrics
from app.settings import Settings
from app.stores.db import Database


def start(
    db: Database,
    settings: Settings,
    owner: str,
    stop: asyncio.Event,
    registry: Registry,
    metrics: Metrics | None = None,
) -> list[asyncio.Task[None]]:
    """Jobs of `registry` (`Container.registry`: every kind the service has) and its
    schedules."""
    runner = JobRunner(
        db,
        owner,
        registry,
        lease_seconds=settings.job_lease_seconds,
        poll_seconds=settings.job_poll_seconds,
        retry_base_seconds=settings.job_retry_base_seconds,
        retry_max_seconds=settings.job_retry_max_seconds,
        concurrency=settings.job_concurrency,
        metrics=metrics,
    )
    scheduler = Scheduler(
        db,
        owner,
        registry.schedules,
        lease_seconds=settings.job_lease_seconds,
        # Renews the leader leases in time; a period's job is at most this late.
        tick_seconds=settings.job_lease_seconds / 3,
        max_attempts=settings.job_max_attempts,
    )
    return [
        asyncio.create_task(runner.run(stop), name="strata-jobs"),
        asyncio.create_task(scheduler.run(stop), name="strata-scheduler"),
    ]
