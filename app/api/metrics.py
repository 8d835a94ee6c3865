"""`GET /metrics`: Prometheus text format, optionally behind its own bearer token."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.api.errors import problem_responses
from app.errors import Unauthorized
from app.metrics import CONTENT_TYPE
from app.services.metrics import MetricsService
from app.settings import Settings

router = APIRouter(tags=["operations"])

# Its own scheme: the scraper holds the metrics token, not an API key (docs/scaling.md).
_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="MetricsToken",
    description="`Authorization: Bearer <STRATA_METRICS_TOKEN>` when the server has one",
)


async def _scraper(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    settings: Settings = request.state.settings
    if settings.metrics_token is None:
        return
    expected = settings.metrics_token.get_secret_value().encode()
    given = credentials.credentials.encode() if credentials else b""
    if not hmac.compare_digest(given, expected):
        raise Unauthorized("send `Authorization: Bearer <metrics token>`")


async def _service(request: Request) -> MetricsService:
    service: MetricsService = request.state.services.metrics
    return service


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    description="Request latency per route template and status, index lag, promotion and "
    "job durations, embedding calls and batch sizes, memories by type (text format 0.0.4).",
    response_class=Response,
    # Open unless the server has a metrics token: the empty requirement says so.
    openapi_extra={"security": [{}, {"MetricsToken": []}]},
    responses={
        200: {
            "description": "Prometheus text exposition format 0.0.4",
            "content": {CONTENT_TYPE.split(";")[0]: {"schema": {"type": "string"}}},
        },
        **problem_responses(Unauthorized),
    },
)
async def get_metrics(
    _: Annotated[None, Depends(_scraper)],
    service: Annotated[MetricsService, Depends(_service)],
) -> Response:
    return Response(await service.exposition(), media_type=CONTENT_TYPE)
