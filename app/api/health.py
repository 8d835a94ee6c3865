"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api.deps import HealthDep
from app.services.health import Readiness

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="The process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Every dependency answers",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "a dependency is down"}},
)
async def readyz(health: HealthDep, response: Response) -> Readiness:
    readiness = await health.readiness()
    if not readiness.ready:
        response.status_code = 503
    return readiness
