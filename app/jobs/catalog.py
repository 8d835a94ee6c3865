"""Every job kind and periodic schedule the service runs: the one place to add one."""

from __future__ import annotations

from datetime import timedelta

from app.jobs import housekeeping, reindex
from app.jobs.registry import Registry
from app.services.reindex import Reindexer
from app.settings import Settings
from app.stores.db import Database


def build_registry(
    db: Database, settings: Settings, reindexer: Reindexer | None = None
) -> Registry:
    """`reindexer` None: a process without the vector index and the embedder (the job
    tests' workers) runs the other kinds and leaves `reindex` jobs to one that has them."""
    registry = Registry()
    housekeeping.register(registry, db, keep=timedelta(days=settings.job_keep_succeeded_days))
    if reindexer is not None:
        reindex.register(registry, reindexer)
    return registry
