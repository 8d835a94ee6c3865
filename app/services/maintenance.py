"""Maintenance on request (`POST /v1/admin/maintenance`): one `maintenance` job per request,
run by the job runner like any other, so its progress and result are read at
`GET /v1/jobs/{id}`. The request is `MaintenanceService`'s; the job, `MaintenanceTasks`'."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from app.core.clock import Clock, utc_now
from app.schemas.forgetting import MaintenanceRequest, MaintenanceTask
from app.schemas.jobs import JobOut
from app.services.forgetting import ForgettingService
from app.services.graph_extraction import GraphBackfill
from app.services.job_kinds import SYSTEM_TENANT, JobContext, JobKind
from app.services.jobs import JobService
from app.services.reindex import Reindexer
from app.services.summaries import SummaryService

MAINTENANCE = "maintenance"

# One promotion pass: the messages it promoted (0: the backlog is empty).
PromotePass = Callable[[], Awaitable[int]]
PROMOTE_MAX_PASSES = 1000


class Maintenance(BaseModel):
    """The `maintenance` job's payload: the request's task, user and dry run."""

    task: MaintenanceTask
    user_id: str | None = None
    dry_run: bool = False


class MaintenanceService:
    def __init__(self, jobs: JobService) -> None:
        self.jobs = jobs

    async def request(self, tenant_id: str, body: MaintenanceRequest) -> JobOut:
        # A fresh key: two requests are two runs (each task is idempotent in itself).
        payload = Maintenance(task=body.task, user_id=body.user_id, dry_run=body.dry_run)
        return await self.jobs.enqueue(
            tenant_id, MAINTENANCE, f"{body.task}:{uuid.uuid4()}", payload.model_dump(mode="json")
        )


class MaintenanceTasks:
    """The `maintenance` job: each task on the service that does it. `promote` is a
    worker's promotion pass, `graph` the offline extraction (None: an LLM extracts)."""

    def __init__(
        self,
        *,
        forgetting: ForgettingService,
        summaries: SummaryService,
        reindexer: Reindexer,
        promote: PromotePass | None,
        graph: GraphBackfill | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self.forgetting = forgetting
        self.summaries = summaries
        self.reindexer = reindexer
        self.promote = promote
        self.graph = graph
        self.clock = clock

    def job(self) -> JobKind[Maintenance]:
        return JobKind(MAINTENANCE, Maintenance, self.run)

    async def run(self, ctx: JobContext, payload: Maintenance) -> dict[str, Any]:
        # Work of the system tenant (none today) would span every tenant; a caller's only its own.
        tenant_id = None if ctx.tenant_id == SYSTEM_TENANT else ctx.tenant_id
        task = {
            "forget": self._forget,
            "reindex": self._reindex,
            "summarize": self._summarize,
            "promote": self._promote,
            "graph": self._graph,
        }[payload.task]
        return {"task": payload.task, **await task(tenant_id, payload.user_id, payload.dry_run)}

    async def _forget(
        self, tenant_id: str | None, user_id: str | None, dry_run: bool
    ) -> dict[str, Any]:
        report = await self.forgetting.sweep(tenant_id=tenant_id, user_id=user_id, dry_run=dry_run)
        return report.as_dict()

    async def _reindex(
        self, tenant_id: str | None, user_id: str | None, dry_run: bool
    ) -> dict[str, Any]:
        result = await self.reindexer.rebuild(tenant_id=tenant_id, user_id=user_id, dry_run=dry_run)
        return {"dry_run": dry_run, **result}

    async def _summarize(
        self, tenant_id: str | None, user_id: str | None, dry_run: bool
    ) -> dict[str, Any]:
        if dry_run:
            return {"dry_run": True, "swept": False}
        # The hourly sweep's rules, now: the periods that closed or changed. It spans every
        # tenant (their own jobs, which a tenant's caller never sees), so only the system
        # tenant is told the counts.
        counts = await self.summaries.sweep(self.clock())
        return {
            "dry_run": False,
            "swept": True,
            **({"enqueued": counts} if tenant_id is None else {}),
        }

    async def _promote(
        self, tenant_id: str | None, user_id: str | None, dry_run: bool
    ) -> dict[str, Any]:
        if self.promote is None:
            raise RuntimeError("this runner has no promoter")
        promoted = passes = 0
        if not dry_run:
            for passes in range(1, PROMOTE_MAX_PASSES + 1):  # noqa: B007 - reported
                done = await self.promote()
                promoted += done
                if done == 0:
                    break
        # Promotion drains every tenant's backlog (the log is one queue): the counts are the
        # system tenant's to see.
        return {
            "dry_run": dry_run,
            "passes": passes,
            **({"promoted": promoted} if tenant_id is None else {}),
        }

    async def _graph(
        self, tenant_id: str | None, user_id: str | None, dry_run: bool
    ) -> dict[str, Any]:
        if self.graph is None:
            raise RuntimeError("an LLM extracts this service's graph: re-run its extraction")
        # Offline extraction over what was promoted before (docs/facts.md).
        return await self.graph.run(tenant_id, user_id, dry_run=dry_run)
