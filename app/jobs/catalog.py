"""Every job kind and periodic schedule the service runs: the one place to add one."""

from __future__ import annotations

from datetime import timedelta

from app.jobs import housekeeping
from app.jobs.registry import Registry
from app.settings import Settings
from app.stores.db import Database


def build_registry(db: Database, settings: Settings) -> Registry:
    registry = Registry()
    housekeeping.register(registry, db, keep=timedelta(days=settings.job_keep_succeeded_days))
    return registry
