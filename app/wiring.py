"""The one place that builds the services from the opened clients.

The api lifespan, the worker (and later a CLI or an MCP server) call `build_services`, so
every entry point runs the same objects wired the same way. Each service is handed the
collaborators it uses in its constructor: what a service depends on is visible in its
signature, and a test can build one from real stores without the rest.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from app.resources import Resources
from app.services.context import ContextService, stored_size
from app.services.context_cache import ContextCache
from app.services.facts import FactExtractor
from app.services.forgetting import ForgettingService
from app.services.graph import GraphService
from app.services.health import HealthService
from app.services.ingest import IngestService
from app.services.jobs import JobService
from app.services.keys import KeyService
from app.services.maintenance import MaintenanceService
from app.services.memories import MemoryService
from app.services.metrics import MetricsService
from app.services.profile import ProfileService
from app.services.promotion import Promoter
from app.services.recall import RecallService
from app.services.reindex import Reindexer
from app.services.rewrite import RewriteService
from app.services.scratchpad import ScratchpadService
from app.services.search import MinRelevance, NewerFactsFirst
from app.services.summaries import SummaryService
from app.services.users import ErasureService, ExportService, UserSections
from app.stores.ratelimit import LocalRateLimiter, RateLimiter, RedisRateLimiter


@dataclass(frozen=True, slots=True)
class Services:
    ingest: IngestService
    memories: MemoryService
    recall: RecallService
    context: ContextService
    health: HealthService
    jobs: JobService
    rewrite: RewriteService
    scratchpad: ScratchpadService
    summaries: SummaryService
    keys: KeyService
    export: ExportService
    erasure: ErasureService
    metrics: MetricsService
    forgetting: ForgettingService
    maintenance: MaintenanceService
    profile: ProfileService
    graph: GraphService


def build_services(resources: Resources) -> Services:
    r = resources
    summaries = build_summaries(r)
    ingest = IngestService(
        r.db, r.buffer, r.vectors, r.settings, r.signals, enqueue_summary=summaries.enqueue
    )
    rewrite = RewriteService(ingest, r.llm, freeze_after_load=r.settings.gc_freeze)
    recall = RecallService(
        r.db,
        r.vectors,
        r.embedder,
        r.settings,
        rewriter=rewrite.for_search,
        # docs/seams.md: newer statements of a change first, then the relevance floor.
        stages=[NewerFactsFirst(r.settings.change_similarity), MinRelevance()],
        clock=r.clock,
    )
    jobs = JobService(r.db, max_attempts=r.settings.job_max_attempts)
    scratchpad = ScratchpadService(ingest, r.buffer, max_bytes=r.settings.scratchpad_max_bytes)
    profile = ProfileService(r.db)
    return Services(
        ingest=ingest,
        memories=MemoryService(r.db, r.vectors, r.embedder, build_reindexer(resources)),
        recall=recall,
        context=ContextService(
            r.db,
            ingest,
            recall,
            scratchpad,
            r.tokens,
            window=r.settings.buffer_window,
            shares=r.settings.context_shares,
            summaries=summaries,
            profile=profile,
            cache=ContextCache(
                r.generations,
                ttl_seconds=r.settings.context_cache_seconds,
                max_bytes=r.settings.context_cache_mb * 2**20,
                weigh=stored_size,
            )
            if r.generations is not None
            else None,
        ),
        health=HealthService(
            {"database": r.db.ping, "buffer": r.buffer.ping, "vectors": r.vectors.ping},
            r.db,
            stale_seconds=r.settings.worker_stale_seconds,
        ),
        jobs=jobs,
        rewrite=rewrite,
        scratchpad=scratchpad,
        summaries=summaries,
        keys=build_keys(resources),
        # Sections of the export, in order: a feature holding user data adds its own here.
        export=ExportService(r.db, UserSections(r.db, r.buffer).all()),
        erasure=build_erasure(resources),
        metrics=MetricsService(r.db, r.metrics),
        forgetting=build_forgetting(resources),
        maintenance=MaintenanceService(jobs),
        profile=profile,
        graph=GraphService(r.db),
    )


def build_erasure(resources: Resources) -> ErasureService:
    r = resources
    return ErasureService(
        r.db,
        r.buffer,
        r.vectors,
        max_attempts=r.settings.job_max_attempts,
        wait_seconds=r.settings.erasure_wait_seconds,
        buffer_on_disk=r.settings.redis_url is not None,
    )


def build_keys(resources: Resources) -> KeyService:
    r = resources
    limiter: RateLimiter
    if r.settings.redis_url is not None:
        # One bucket per key across every api replica; the process's own while the
        # buffer's breaker skips Redis.
        limiter = RedisRateLimiter(
            r.buffer.redis, breaker=r.buffer.breaker, timeout=r.settings.redis_timeout_seconds
        )
    else:
        limiter = LocalRateLimiter()  # embedded: one process by design
    return KeyService(r.db, r.settings, limiter)


def build_summaries(resources: Resources) -> SummaryService:
    r = resources
    return SummaryService(r.db, r.vectors, r.embedder, r.tokens, r.llm, r.settings)


def build_forgetting(resources: Resources) -> ForgettingService:
    r = resources
    return ForgettingService(r.db, r.vectors, build_reindexer(resources), r.settings, clock=r.clock)


def build_reindexer(resources: Resources) -> Reindexer:
    r = resources
    return Reindexer(r.db, r.vectors, r.embedder, r.settings)


def build_promoter(resources: Resources, owner: str, stop: asyncio.Event | None = None) -> Promoter:
    r = resources
    return Promoter(
        r.db,
        r.vectors,
        r.embedder,
        r.settings,
        owner=owner,
        stop=stop,
        signals=r.signals,
        extract_facts=build_fact_extractor(resources) is not None,
        warm_scoring=r.settings.run_worker_in_process,
        clock=r.clock,
    )


def build_fact_extractor(resources: Resources) -> FactExtractor | None:
    """None without an LLM (or with extraction turned off): then nothing is extracted."""
    r = resources
    if r.llm is None or not r.settings.extract_facts:
        return None
    return FactExtractor(r.db, r.vectors, r.embedder, r.llm, r.settings)
