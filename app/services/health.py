"""Readiness: each dependency checked, with its latency; the index lag and the worker's
heartbeat beside them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from app.stores import heartbeats
from app.stores import sessions as session_store
from app.stores.db import Database


class Check(BaseModel):
    ok: bool
    latency_ms: float | None = None
    error: str | None = None


class IndexStatus(BaseModel):
    lag_messages: int = Field(description="messages in the log not yet indexed (all tenants)")
    sessions_behind: int = Field(description="sessions holding such messages")


class WorkerStatus(BaseModel):
    alive: bool = Field(description="a worker's heartbeat is fresher than the stale limit")
    heartbeat_age_seconds: float | None = Field(
        description="age of the freshest heartbeat; null when no worker ever beat"
    )


class Readiness(BaseModel):
    ready: bool = Field(
        description="every dependency answers, and a worker is alive or nothing waits to be indexed"
    )
    checks: dict[str, Check]
    index: IndexStatus | None = Field(default=None, description="null when the database is down")
    worker: WorkerStatus | None = Field(default=None, description="null when the database is down")


async def _check(probe: Probe, timeout: float = 2.0) -> Check:
    try:
        latency = await asyncio.wait_for(probe(), timeout)
        return Check(ok=True, latency_ms=round(latency, 3))
    except Exception as exc:  # any failure makes the dependency not ready, never a 500
        cause = exc.__cause__ or exc  # a store's error wraps the driver's, which says more
        return Check(ok=False, error=f"{type(cause).__name__}: {cause}"[:300])


Probe = Callable[[], Awaitable[float]]


class HealthService:
    """Readiness over named probes (each returns its latency in ms), so a new dependency is
    one more entry where the services are built, not an edit here. With `db`, also the
    index lag and the workers' heartbeat: messages waiting with no live worker make the
    service not ready (they would never be indexed)."""

    def __init__(
        self, probes: dict[str, Probe], db: Database | None = None, stale_seconds: float = 30.0
    ) -> None:
        self.probes = probes
        self.db = db
        self.stale_seconds = stale_seconds
        # A worker gets as long to show up as it may go silent: in the full stack it
        # starts after the api is ready, so a backlog left from before must not hold the
        # api back from becoming ready.
        self._grace_until = time.monotonic() + stale_seconds

    async def readiness(self) -> Readiness:
        results = await asyncio.gather(*(_check(probe) for probe in self.probes.values()))
        checks = dict(zip(self.probes, results, strict=True))
        ready = all(c.ok for c in checks.values())
        index, worker = await self._background()
        if (
            index is not None
            and worker is not None
            and index.lag_messages
            and not worker.alive
            and time.monotonic() > self._grace_until
        ):
            ready = False
        return Readiness(ready=ready, checks=checks, index=index, worker=worker)

    async def _background(self) -> tuple[IndexStatus | None, WorkerStatus | None]:
        if self.db is None:
            return None, None
        try:
            async with asyncio.timeout(2.0):
                async with self.db.read() as tx:
                    lag = await session_store.index_lag(tx)
                    beat = await heartbeats.latest(tx)
        except Exception:  # the database check above reports the outage
            return None, None
        age = (datetime.now(UTC) - beat.beat_at).total_seconds() if beat is not None else None
        return (
            IndexStatus(lag_messages=lag.messages, sessions_behind=lag.sessions),
            WorkerStatus(
                alive=age is not None and age <= self.stale_seconds,
                heartbeat_age_seconds=round(age, 3) if age is not None else None,
            ),
        )
