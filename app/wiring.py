"""The one composition root: every service, built once, from the opened clients.

Every entry point (the api, the worker, next a CLI, an MCP server or a console) takes the
same `Container`:

    async with open_container(settings) as c:  # open_resources, then build_container
        c.services.recall                       # the services (the api's request.state.services)
        promoter = c.promoter(owner, stop)      # a worker's promoter: owner and stop are its own
        registry = c.registry(promoter.run_once)  # every job kind and schedule, on c's services

The api lifespan (app/main.py) builds one and, embedded, hands that same object to its
in-process worker (app/worker.py), so both run on one set of services; `python -m
app.worker` opens its own. A new service is a field of `Services`, its line in
`build_container`, and its alias in app/api/deps.py. Each service is handed the
collaborators it uses in its constructor: what a service depends on is visible in its
signature, and a test can build one from real stores without the rest. A service reads
no `Settings`: it is handed a frozen config of the fields it reads, built from the settings
here (`key_config` and the others at the end of this module) and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass

from app.core.clock import Clock
from app.jobs.catalog import build_registry
from app.jobs.registry import Registry
from app.resources import Resources, open_resources
from app.services.context import ContextService, stored_size
from app.services.context_cache import ContextCache
from app.services.directory import DirectoryService
from app.services.facts import FactConfig, FactExtractor
from app.services.forgetting import ForgettingConfig, ForgettingService
from app.services.graph import GraphService
from app.services.graph_extraction import GraphBackfill, GraphExtraction
from app.services.health import HealthService
from app.services.index_upkeep import GraphUpkeep
from app.services.indexing import IndexConfig
from app.services.ingest import IngestConfig, IngestService
from app.services.jobs import JobService
from app.services.keys import KeyConfig, KeyService
from app.services.maintenance import MaintenanceService, PromotePass
from app.services.memories import MemoryService
from app.services.metrics import MetricsService
from app.services.profile import ProfileService
from app.services.promotion import Promoter, PromoterParts, PromotionConfig
from app.services.recall import RecallConfig, RecallService
from app.services.recall_caches import MaxAccessCounts, QueryVectors
from app.services.reindex import Reindexer
from app.services.reinforcing import Reinforcer
from app.services.rewrite import RewriteService
from app.services.scratchpad import ScratchpadService
from app.services.search import (
    HeldTurnsLast,
    MinRelevance,
    NewerFactsFirst,
    ScoreConfig,
    UserWordsFirst,
)
from app.services.summaries import SummaryConfig, SummaryService
from app.services.users import ErasureService, ExportService, UserSections
from app.settings import Settings
from app.stores.db import Database
from app.stores.ratelimit import LocalRateLimiter, RateLimiter, RedisRateLimiter


@dataclass(frozen=True, slots=True)
class Services:
    """What the routes reach (`request.state.services`, app/api/deps.py)."""

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
    directory: DirectoryService  # the console's lists (app/console)


@dataclass(frozen=True, slots=True)
class Container:
    """The services and the worker's collaborators of one process, each built once."""

    resources: Resources
    services: Services
    reindexer: Reindexer  # the one the memories, forgetting and the reindex jobs share
    fact_extractor: FactExtractor | None  # None: nothing is extracted (no LLM, or turned off)

    def promoter(self, owner: str, stop: asyncio.Event | None = None) -> Promoter:
        """A worker's promoter: `owner` names its leases, `stop` ends its pass."""
        return build_promoter(self.resources, owner, stop)

    def registry(self, promote: PromotePass | None = None) -> Registry:
        """Every job kind and schedule (app/jobs/catalog.py), on this container's services;
        `promote` is the worker's promotion pass (the `promote` maintenance task)."""
        s = self.services
        return build_registry(
            self.resources.settings,
            jobs=s.jobs,
            summary_service=s.summaries,
            reindexer=self.reindexer,
            erasure_service=s.erasure,
            forgetting=s.forgetting,
            promote=promote,
            fact_extractor=self.fact_extractor,
            graph_backfill=self._graph_backfill(),
        )

    def _graph_backfill(self) -> GraphBackfill | None:
        """The `graph` maintenance task's, where no LLM extracts."""
        extraction = graph_extraction(self.resources, force=True)
        if extraction is None:
            return None
        return GraphBackfill(self.resources.db, extraction, self.reindexer)


@contextlib.asynccontextmanager
async def open_container(
    settings: Settings, *, clock: Clock | None = None
) -> AsyncIterator[Container]:
    """Open every client (app/resources.py) and build the container on them; closes the
    clients on exit. `clock` moves "now" for reinforcement and forgetting (simulations)."""
    async with open_resources(settings) as resources:
        if clock is not None:
            resources.clock = clock
        yield build_container(resources)


def build_container(resources: Resources) -> Container:
    r = resources
    graph_upkeep(r.settings).keep(r.vectors)  # when the embedded index builds its graph
    reindexer = Reindexer(r.db, r.vectors, r.embedder, index_config(r.settings))
    summaries = SummaryService(
        r.db, r.vectors, r.embedder, r.tokens, r.llm, summary_config(r.settings)
    )
    ingest = IngestService(
        r.db,
        r.buffer,
        r.vectors,
        ingest_config(r.settings),
        r.signals,
        enqueue_summary=summaries.enqueue,
    )
    rewrite = RewriteService(ingest, r.llm, freeze_after_load=r.settings.gc_freeze)
    recall = _recall(r, rewrite)
    jobs = JobService(r.db, max_attempts=r.settings.job_max_attempts)
    scratchpad = ScratchpadService(ingest, r.buffer, max_bytes=r.settings.scratchpad_max_bytes)
    profile = ProfileService(r.db)
    services = Services(
        ingest=ingest,
        memories=MemoryService(r.db, r.vectors, r.embedder, reindexer),
        recall=recall,
        context=_context(r, ingest, recall, scratchpad, summaries, profile),
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
        erasure=ErasureService(
            r.db,
            r.buffer,
            r.vectors,
            max_attempts=r.settings.job_max_attempts,
            wait_seconds=r.settings.erasure_wait_seconds,
            buffer_on_disk=r.settings.redis_url is not None,
            purge_database=r.settings.erasure_purge_database,
            purge_lock_timeout_seconds=r.settings.erasure_purge_lock_timeout_seconds,
            purge_wait_seconds=r.settings.erasure_purge_wait_seconds,
        ),
        metrics=MetricsService(r.db, r.metrics),
        forgetting=ForgettingService(
            r.db, r.vectors, reindexer, forgetting_config(r.settings), clock=r.clock
        ),
        maintenance=MaintenanceService(jobs),
        profile=profile,
        graph=GraphService(r.db),
        directory=DirectoryService(r.db),
    )
    return Container(
        resources=r,
        services=services,
        reindexer=reindexer,
        fact_extractor=FactExtractor(r.db, r.vectors, r.embedder, r.llm, fact_config(r.settings))
        if r.llm is not None and _extracts_facts(r)
        else None,
    )


def _context(
    r: Resources,
    ingest: IngestService,
    recall: RecallService,
    scratchpad: ScratchpadService,
    summaries: SummaryService,
    profile: ProfileService,
) -> ContextService:
    """Context, with its cache of profiles and summaries when writes announce changes."""
    return ContextService(
        r.db,
        ingest,
        recall,
        scratchpad,
        r.tokens,
        window=r.settings.buffer_window,
        shares=r.settings.context_shares,
        recent_turns=r.settings.context_recent_turns,
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
    )


def _recall(r: Resources, rewrite: RewriteService) -> RecallService:
    """Recall with its caches and its write-behind reinforcement."""
    max_access = MaxAccessCounts(r.db)
    return RecallService(
        r.db,
        r.vectors,
        r.embedder,
        recall_config(r.settings),
        rewriter=rewrite.for_search,
        # docs/seams.md: the user's words above the replies to them, newer statements of a
        # change first, then the relevance floor.
        # The held turns first: a correction among them is then put back above what it
        # replaces (`NewerFactsFirst`).
        stages=[
            HeldTurnsLast(),
            UserWordsFirst(),
            NewerFactsFirst(r.settings.change_similarity),
            MinRelevance(),
        ],
        clock=r.clock,
        query_vectors=QueryVectors(r.embedder),
        max_access=max_access,
        reinforcer=Reinforcer(r.db, r.vectors, clock=r.clock, on_written=max_access.raise_to),
    )


def graph_extraction(resources: Resources, *, force: bool = False) -> GraphExtraction | None:
    """Offline extraction (app/core/entities.py) where no LLM extracts: a promoted turn's
    graph and profile by patterns, unless turned off (`force`: the `graph` task asked)."""
    s = resources.settings
    if resources.llm is not None or not (s.offline_extraction or force):
        return None
    return GraphExtraction(resources.vectors, s.offline_extraction_kinds)


def _extracts_facts(resources: Resources) -> bool:
    """Without an LLM (or with extraction turned off) nothing is extracted."""
    return resources.llm is not None and resources.settings.extract_facts


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
    return KeyService(r.db, key_config(r.settings), limiter)


def build_key_service(db: Database, settings: Settings) -> KeyService:
    """The keys of a shell tool that opens only the database (app/keys.py): it manages keys
    and never limits a request, so its limiter is the process's own."""
    return KeyService(db, key_config(settings), LocalRateLimiter())


def build_promoter(resources: Resources, owner: str, stop: asyncio.Event | None = None) -> Promoter:
    """A promoter on `resources` (`Container.promoter`; a test or a bench runs several, one
    per simulated worker)."""
    r = resources
    config = dataclasses.replace(
        promotion_config(r.settings),
        extract_facts=_extracts_facts(r),
        warm_scoring=r.settings.run_worker_in_process,
    )
    parts = PromoterParts(
        r.db, r.vectors, r.embedder, r.signals, graph=graph_extraction(r), clock=r.clock
    )
    return Promoter(parts, config, owner=owner, stop=stop)


# The slice of the settings each service reads (app/settings.py): built here only.


def key_config(s: Settings) -> KeyConfig:
    return KeyConfig(
        auth_mode=s.auth_mode,
        api_key=s.api_key,
        admin_key=s.admin_key,
        default_tenant=s.default_tenant,
        key_cache_seconds=s.key_cache_seconds,
        rate_limit_per_second=s.rate_limit_per_second,
        rate_limit_burst=s.rate_limit_burst,
        is_sqlite=s.is_sqlite,
    )


def graph_upkeep(s: Settings) -> GraphUpkeep:
    return GraphUpkeep(min_points=s.index_build_min_points, fraction=s.index_build_fraction)


def index_config(s: Settings) -> IndexConfig:
    return IndexConfig(
        dense_context_turns=s.dense_context_turns,
        dense_context_weight=s.dense_context_weight,
        dense_next_weight=s.dense_next_weight,
        sparse_context_turns=s.sparse_context_turns,
        sparse_context_weight=s.sparse_context_weight,
        sparse_next_weight=s.sparse_next_weight,
    )


def forgetting_config(s: Settings) -> ForgettingConfig:
    return ForgettingConfig(
        forgetting_enabled=s.forgetting_enabled,
        importance_intrinsic_share=s.importance_intrinsic_share,
    )


def ingest_config(s: Settings) -> IngestConfig:
    return IngestConfig(
        ingest_max_chars=s.ingest_max_chars,
        buffer_window=s.buffer_window,
        wait_timeout_seconds=s.wait_timeout_seconds,
        wait_poll_seconds=s.wait_poll_seconds,
    )


def summary_config(s: Settings) -> SummaryConfig:
    return SummaryConfig(
        summary_daily_tokens=s.summary_daily_tokens,
        summary_weekly_tokens=s.summary_weekly_tokens,
        summary_essence_tokens=s.summary_essence_tokens,
        summary_essence_weeks=s.summary_essence_weeks,
        summary_lookback_hours=s.summary_lookback_hours,
        summary_context_dailies=s.summary_context_dailies,
        summary_context_weeklies=s.summary_context_weeklies,
        job_max_attempts=s.job_max_attempts,
    )


def fact_config(s: Settings) -> FactConfig:
    return FactConfig(fact_candidates=s.fact_candidates, fact_similarity=s.fact_similarity)


def score_config(s: Settings) -> ScoreConfig:
    return ScoreConfig(
        candidate_pool=s.candidate_pool,
        rrf_k=s.rrf_k,
        sparse_weight=s.sparse_weight,
        dense_weight=s.dense_weight,
        dense_weight_cross_language=s.dense_weight_cross_language,
        relevance_weights=s.relevance_weights,
        cross_language_relevance=s.cross_language_relevance,
        relevance_share=s.relevance_share,
        answer_type_penalty=s.answer_type_penalty,
        named_period_penalty=s.named_period_penalty,
        weight_semantic=s.weight_semantic,
        weight_recency=s.weight_recency,
        weight_importance=s.weight_importance,
        recency_lambda_per_day=s.recency_lambda_per_day,
        importance_intrinsic_share=s.importance_intrinsic_share,
    )


def recall_config(s: Settings) -> RecallConfig:
    return RecallConfig(score=score_config(s), reinforce_min_relevance=s.reinforce_min_relevance)


def promotion_config(s: Settings) -> PromotionConfig:
    return PromotionConfig(
        index=index_config(s),
        worker_batch_messages=s.worker_batch_messages,
        worker_slice_chars=s.worker_slice_chars,
        worker_lease_seconds=s.worker_lease_seconds,
        promote_retry_base_seconds=s.promote_retry_base_seconds,
        promote_retry_max_seconds=s.promote_retry_max_seconds,
        dedupe_threshold=s.dedupe_threshold,
        job_max_attempts=s.job_max_attempts,
    )
