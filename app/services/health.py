"""Readiness: each dependency checked, with its latency."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from pydantic import BaseModel


class Check(BaseModel):
    ok: bool
    latency_ms: float | None = None
    error: str | None = None


class Readiness(BaseModel):
    ready: bool
    checks: dict[str, Check]


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
    one more entry where the services are built, not an edit here."""

    def __init__(self, probes: dict[str, Probe]) -> None:
        self.probes = probes

    async def readiness(self) -> Readiness:
        results = await asyncio.gather(*(_check(probe) for probe in self.probes.values()))
        checks = dict(zip(self.probes, results, strict=True))
        return Readiness(ready=all(c.ok for c in checks.values()), checks=checks)
