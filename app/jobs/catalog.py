"""Every job kind and periodic schedule the service runs: the one place to add one."""

from __future__ import annotations

from datetime import timedelta

from app.jobs import facts, housekeeping, reindex, summaries
from app.jobs.registry import Registry
from app.services.facts import FactExtractor
from app.services.reindex import Reindexer
from app.services.summaries import SummaryService
from app.settings import Settings
from app.stores.db import Database


def build_registry(
    db: Database,
    settings: Settings,
    *,
    summary_service: SummaryService | None = None,
    reindexer: Reindexer | None = None,
    fact_extractor: FactExtractor | None = None,
) -> Registry:
    """Every kind whose collaborators are given: a runner built without the summary
    service or the reindexer (a test, a tool, a process without the vector index) leaves
    those jobs to one built with them."""
    registry = Registry()
    housekeeping.register(registry, db, keep=timedelta(days=settings.job_keep_succeeded_days))
    if summary_service is not None:
        summaries.register(registry, summary_service)
    if reindexer is not None:
        reindex.register(registry, reindexer)
    if fact_extractor is not None:  # only with an LLM: without one nothing is extracted
        facts.register(registry, fact_extractor)
    return registry
