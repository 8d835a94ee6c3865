"""Every job kind and periodic schedule the service runs: the one place to add one."""

from __future__ import annotations

from datetime import timedelta

from app.jobs import housekeeping, summaries
from app.jobs.registry import Registry
from app.services.summaries import SummaryService
from app.settings import Settings
from app.stores.db import Database


def build_registry(
    db: Database, settings: Settings, *, summary_service: SummaryService | None = None
) -> Registry:
    """Every kind whose collaborators are given: a runner built without the summary
    service (a test, a tool) leaves summary jobs to one built with it."""
    registry = Registry()
    housekeeping.register(registry, db, keep=timedelta(days=settings.job_keep_succeeded_days))
    if summary_service is not None:
        summaries.register(registry, summary_service)
    return registry
