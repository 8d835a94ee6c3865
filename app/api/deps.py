"""Dependencies of the routes: the caller's tenant and the services, as `Annotated` aliases."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.errors import Unauthorized
from app.services.context import ContextService
from app.services.graph import GraphService
from app.services.health import HealthService
from app.services.ingest import IngestService
from app.services.jobs import JobService
from app.services.memories import MemoryService
from app.services.profile import ProfileService
from app.services.recall import RecallService
from app.services.rewrite import RewriteService
from app.services.scratchpad import ScratchpadService
from app.services.summaries import SummaryService
from app.settings import Settings
from app.wiring import Services

ID_PATTERN = r"^[A-Za-z0-9._:@-]+$"


def _services(request: Request) -> Services:
    services: Services = request.state.services
    return services


def _settings(request: Request) -> Settings:
    settings: Settings = request.state.settings
    return settings


_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <api key>`")


async def _tenant(
    settings: Annotated[Settings, Depends(_settings)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """With no key configured the API is open and every caller is the default tenant."""
    if settings.api_key is None:
        return settings.default_tenant
    expected = settings.api_key.get_secret_value().encode()
    given = credentials.credentials.encode() if credentials else b""
    if not hmac.compare_digest(given, expected):
        raise Unauthorized("send `Authorization: Bearer <api key>`")
    return settings.default_tenant


TenantDep = Annotated[str, Depends(_tenant)]


def _ingest(request: Request) -> IngestService:
    return _services(request).ingest


def _memories(request: Request) -> MemoryService:
    return _services(request).memories


def _recall(request: Request) -> RecallService:
    return _services(request).recall


def _context(request: Request) -> ContextService:
    return _services(request).context


def _health(request: Request) -> HealthService:
    return _services(request).health


def _jobs(request: Request) -> JobService:
    return _services(request).jobs


IngestDep = Annotated[IngestService, Depends(_ingest)]
MemoryDep = Annotated[MemoryService, Depends(_memories)]
RecallDep = Annotated[RecallService, Depends(_recall)]
ContextDep = Annotated[ContextService, Depends(_context)]
HealthDep = Annotated[HealthService, Depends(_health)]
JobDep = Annotated[JobService, Depends(_jobs)]


def _rewrite(request: Request) -> RewriteService:
    return _services(request).rewrite


RewriteDep = Annotated[RewriteService, Depends(_rewrite)]


def _scratchpad(request: Request) -> ScratchpadService:
    return _services(request).scratchpad


ScratchpadDep = Annotated[ScratchpadService, Depends(_scratchpad)]


def _summaries(request: Request) -> SummaryService:
    return _services(request).summaries


SummaryDep = Annotated[SummaryService, Depends(_summaries)]


def _profile(request: Request) -> ProfileService:
    return _services(request).profile


def _graph(request: Request) -> GraphService:
    return _services(request).graph


ProfileDep = Annotated[ProfileService, Depends(_profile)]
GraphDep = Annotated[GraphService, Depends(_graph)]

SessionIdPath = Annotated[
    str, Path(min_length=1, max_length=128, pattern=ID_PATTERN, examples=["session-1"])
]
UserIdQuery = Annotated[
    str, Query(min_length=1, max_length=128, pattern=ID_PATTERN, examples=["user-42"])
]
LimitQuery = Annotated[int, Query(ge=1, le=200, description="page size")]
UserIdPath = Annotated[
    str, Path(min_length=1, max_length=128, pattern=ID_PATTERN, examples=["user-42"])
]
