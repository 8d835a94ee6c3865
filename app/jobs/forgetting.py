"""Forgetting and maintenance as jobs: the periodic `forget_sweep` (docs/forgetting.md) and
`maintenance`, the task a caller asks for at `POST /v1/admin/maintenance`.

The sweep runs under the scheduler's leader lease and its job is keyed by the period, so
two workers run it once; a maintenance job is keyed by its request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from app.core.clock import Clock, utc_now
from app.jobs.registry import SYSTEM_TENANT, JobContext, Registry
from app.services.forgetting import ForgettingService
from app.services.graph_extraction import GraphBackfill
from app.services.maintenance import MAINTENANCE
from app.services.reindex import Reindexer
from app.services.summaries import SummaryService

FORGET_SWEEP = "forget_sweep"

# One promotion pass: the messages it promoted (0: the backlog is empty).
PromotePass = Callable[[], Awaitable[int]]
PROMOTE_MAX_PASSES = 1000


def register_sweep(registry: Registry, forgetting: ForgettingService, *, every: timedelta) -> None:
    async def forget_sweep(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        # "Now" is the service's clock, not the period: forgetting is about elapsed time,
        # and a re-run after a crash finds the same rows already tombstoned.
        report = await forgetting.sweep(scheduled=True)
        result = report.as_dict()
        result["items"] = result["items"][:100]
        return result

    registry.add(FORGET_SWEEP, forget_sweep)
    registry.every(every, FORGET_SWEEP)


def register_maintenance(
    registry: Registry,
    *,
    forgetting: ForgettingService,
    summaries: SummaryService,
    reindexer: Reindexer,
    promote: PromotePass | None,
    graph: GraphBackfill | None = None,
    clock: Clock = utc_now,
) -> None:
    async def maintenance(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        task = payload["task"]
        user_id = payload.get("user_id")
        dry_run = bool(payload.get("dry_run"))
        # Work of the system tenant (none today) would span every tenant; a caller's only its own.
        tenant_id = None if ctx.tenant_id == SYSTEM_TENANT else ctx.tenant_id
        if task == "forget":
            report = await forgetting.sweep(tenant_id=tenant_id, user_id=user_id, dry_run=dry_run)
            return {"task": task, **report.as_dict()}
        if task == "reindex":
            result = await reindexer.rebuild(tenant_id=tenant_id, user_id=user_id, dry_run=dry_run)
            return {"task": task, "dry_run": dry_run, **result}
        if task == "summarize":
            if dry_run:
                return {"task": task, "dry_run": True, "swept": False}
            # The hourly sweep's rules, now: the periods that closed or changed. It spans
            # every tenant (their own jobs, which a tenant's caller never sees), so only
            # the system tenant is told the counts.
            counts = await summaries.sweep(clock())
            return {
                "task": task,
                "dry_run": False,
                "swept": True,
                **({"enqueued": counts} if tenant_id is None else {}),
            }
        if task == "promote":
            if promote is None:
                raise RuntimeError("this runner has no promoter")
            promoted = passes = 0
            if not dry_run:
                for passes in range(1, PROMOTE_MAX_PASSES + 1):  # noqa: B007 - reported
                    done = await promote()
                    promoted += done
                    if done == 0:
                        break
            # Promotion drains every tenant's backlog (the log is one queue): the counts are
            # the system tenant's to see.
            return {
                "task": task,
                "dry_run": dry_run,
                "passes": passes,
                **({"promoted": promoted} if tenant_id is None else {}),
            }
        if task == "graph":
            if graph is None:
                raise RuntimeError("an LLM extracts this service's graph: re-run its extraction")
            # Offline extraction over what was promoted before (docs/facts.md).
            result = await graph.run(tenant_id, user_id, dry_run=dry_run)
            return {"task": task, **result}
        raise ValueError(f"unknown maintenance task {task!r}")

    registry.add(MAINTENANCE, maintenance)
