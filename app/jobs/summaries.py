"""Summaries as jobs: `summarize` brings one (user, level, period) up to date and, when it
changed something, queues the level above; the hourly `summaries_sweep` finds the periods
that closed or whose inputs changed (docs/architecture.md, "Summaries")."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, date, datetime, timedelta
from typing import Any

from app.core import periods
from app.core.periods import Level
from app.jobs.registry import JobContext, Registry
from app.services.summaries import SUMMARIZE, SummaryService

SUMMARIES_SWEEP = "summaries_sweep"

log = logging.getLogger("strata.summaries")


def register(
    registry: Registry, summaries: SummaryService, *, every: timedelta = timedelta(hours=1)
) -> None:
    async def summarize(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        user_id = str(payload["user_id"])
        level: Level = payload["level"]
        day = date.fromisoformat(payload["period_start"]) if payload.get("period_start") else None
        outcome = await summaries.summarize(ctx.tenant_id, user_id, level, day)
        result: dict[str, Any] = {"changed": outcome.changed}
        if outcome.summary is None:
            return {**result, "skipped": "the period has nothing to summarise"}
        s = outcome.summary
        result.update(
            id=str(s.id),
            method=s.method,
            tokens=s.tokens,
            period_start=s.period_start.isoformat(),
            llm_usage=outcome.llm_usage,
        )
        parent = periods.PARENT[level]
        if outcome.changed and parent is not None:
            # The level above, once its period has closed, or before if someone asked for
            # it (a weekly of the open week that a session's deletion queued again may
            # have run before this daily was back): a re-run of this job queues it again,
            # which its hash then makes a no-op.
            tz = periods.zone(s.timezone)
            first_day = periods.local_day(s.period_start, tz)
            if parent == "essence":
                result["queued"] = await _queue_parent(
                    summaries, ctx.tenant_id, user_id, parent, None
                )
            else:
                week = periods.week_start(first_day)
                if periods.period(parent, first_day, tz).closed(
                    datetime.now(UTC)
                ) or await summaries.asked_for(ctx.tenant_id, user_id, parent, week):
                    result["queued"] = await _queue_parent(
                        summaries, ctx.tenant_id, user_id, parent, week
                    )
        return result

    async def sweep(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        # "Now" is the period's start, not the clock: a re-run decides the same way.
        return await summaries.sweep(datetime.fromisoformat(payload["period"]))

    registry.add(SUMMARIZE, summarize)
    registry.add(SUMMARIES_SWEEP, sweep)
    registry.every(every, SUMMARIES_SWEEP)


async def _queue_parent(
    summaries: SummaryService, tenant_id: str, user_id: str, level: Level, day: date | None
) -> str:
    """Queue the parent's job. If it is running, it may have read its inputs before this
    change: wait for it to end and queue it again (the hourly sweep catches the rest)."""
    for _ in range(PARENT_WAIT_TRIES):
        _, key, queued = await summaries.enqueue(tenant_id, user_id, level, day)
        if queued:
            return key
        await asyncio.sleep(PARENT_WAIT_SECONDS)
    log.warning("summary job %s kept running; the sweep will bring it up to date", key)
    return key


PARENT_WAIT_TRIES = 120
PARENT_WAIT_SECONDS = 0.5
