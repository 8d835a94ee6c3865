"""Readiness: each dependency checked, with its latency."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from pydantic import BaseModel

from app.resources import Resources


class Check(BaseModel):
    ok: bool
    latency_ms: float | None = None
    error: str | None = None


class Readiness(BaseModel):
    ready: bool
    checks: dict[str, Check]


async def _check(probe: Callable[[], Awaitable[float]], timeout: float = 2.0) -> Check:
    try:
        latency = await asyncio.wait_for(probe(), timeout)
        return Check(ok=True, latency_ms=round(latency, 3))
    except Exception as exc:  # any failure makes the dependency not ready, never a 500
        cause = exc.__cause__ or exc  # a store's error wraps the driver's, which says more
        return Check(ok=False, error=f"{type(cause).__name__}: {cause}"[:300])


class HealthService:
    def __init__(self, resources: Resources) -> None:
        self.r = resources

    async def readiness(self) -> Readiness:
        names = ("database", "buffer", "vectors")
        results = await asyncio.gather(
            _check(self.r.db.ping), _check(self.r.buffer.ping), _check(self.r.vectors.ping)
        )
        checks = dict(zip(names, results, strict=True))
        return Readiness(ready=all(c.ok for c in checks.values()), checks=checks)
