"""Every job kind and periodic schedule the service runs: the one place to add one."""

from __future__ import annotations

from datetime import timedelta

from app.jobs import erasure, facts, housekeeping, reindex, summaries
from app.jobs import forgetting as forgetting_jobs
from app.jobs.forgetting import PromotePass
from app.jobs.registry import Registry
from app.services.facts import FactExtractor
from app.services.forgetting import ForgettingService
from app.services.graph_extraction import GraphBackfill
from app.services.reindex import Reindexer
from app.services.summaries import SummaryService
from app.services.users import ErasureService
from app.settings import Settings
from app.stores.db import Database


def build_registry(
    db: Database,
    settings: Settings,
    *,
    summary_service: SummaryService | None = None,
    reindexer: Reindexer | None = None,
    erasure_service: ErasureService | None = None,
    forgetting: ForgettingService | None = None,
    promote: PromotePass | None = None,
    fact_extractor: FactExtractor | None = None,
    graph_backfill: GraphBackfill | None = None,
) -> Registry:
    """Every kind whose collaborators are given: a runner built without the summary
    service, the reindexer or the erasure service (a test, a tool, a process without the
    vector index) leaves those jobs to one built with them."""
    registry = Registry()
    housekeeping.register(registry, db, keep=timedelta(days=settings.job_keep_succeeded_days))
    if summary_service is not None:
        summaries.register(registry, summary_service)
    if reindexer is not None:
        reindex.register(registry, reindexer)
    if erasure_service is not None:
        erasure.register(registry, erasure_service)
    if forgetting is not None:
        forgetting_jobs.register_sweep(
            registry, forgetting, every=timedelta(hours=settings.forgetting_sweep_hours)
        )
        if summary_service is not None and reindexer is not None:
            forgetting_jobs.register_maintenance(
                registry,
                forgetting=forgetting,
                summaries=summary_service,
                reindexer=reindexer,
                promote=promote,
                graph=graph_backfill,
                clock=forgetting.clock,
            )
    if fact_extractor is not None:  # only with an LLM: without one nothing is extracted
        facts.register(registry, fact_extractor)
    return registry
