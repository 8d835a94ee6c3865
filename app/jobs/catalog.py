"""Every job kind and periodic schedule the service runs: the one list of what a process
registers. Each kind is declared beside its service (app/services/job_kinds.py); this
module only says which of them a process runs, on which services."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from app.jobs.registry import Registry
from app.services.facts import FactExtractor
from app.services.forgetting import ForgettingService
from app.services.graph_extraction import GraphBackfill
from app.services.job_kinds import JobKind
from app.services.jobs import JobService
from app.services.maintenance import MaintenanceTasks, PromotePass
from app.services.reindex import Reindexer
from app.services.summaries import SummaryService
from app.services.users import ERASE_USER, ErasureService
from app.settings import Settings


def build_registry(
    settings: Settings,
    *,
    jobs: JobService,
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
    keep = timedelta(days=settings.job_keep_succeeded_days)
    # Erasure receipts stay: the proof that a user was erased (docs/privacy.md).
    kinds: list[JobKind[Any]] = [jobs.purge_job(keep=keep, keep_kinds=(ERASE_USER,))]
    if summary_service is not None:
        kinds += summary_service.jobs()
    if reindexer is not None:
        kinds.append(reindexer.job())
    if erasure_service is not None:
        kinds.append(erasure_service.job())
    if forgetting is not None:
        kinds.append(forgetting.sweep_job(every=timedelta(hours=settings.forgetting_sweep_hours)))
        if summary_service is not None and reindexer is not None:
            tasks = MaintenanceTasks(
                forgetting=forgetting,
                summaries=summary_service,
                reindexer=reindexer,
                promote=promote,
                graph=graph_backfill,
                clock=forgetting.clock,
            )
            kinds.append(tasks.job())
    if fact_extractor is not None:  # only with an LLM: without one nothing is extracted
        kinds.append(fact_extractor.job())
    return Registry(kinds)
