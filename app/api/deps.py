"""Dependencies of the routes: the gate (who is calling, and may they), and the services,
as `Annotated` aliases.

`TenantDep` is the gate: every /v1 route takes it (a test walks the routes), and with it the
key check, the scope, the user binding and the rate limit (docs/security.md).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.core.auth import (
    SCOPE_MARKER,
    Principal,
    foreign_users,
    format_scopes,
    is_loopback,
    required_scope,
)
from app.errors import InsufficientScope, LoopbackOnly, UserNotAllowed
from app.schemas.common import ID_PATTERN, ID_RULES
from app.services.context import ContextService
from app.services.forgetting import ForgettingService
from app.services.graph import GraphService
from app.services.health import HealthService
from app.services.ingest import IngestService
from app.services.jobs import JobService
from app.services.keys import KeyService
from app.services.maintenance import MaintenanceService
from app.services.memories import MemoryService
from app.services.profile import ProfileService
from app.services.recall import RecallService
from app.services.rewrite import RewriteService
from app.services.scratchpad import ScratchpadService
from app.services.summaries import SummaryService
from app.services.users import ErasureService, ExportService
from app.wiring import Services

READS: dict[str, Any] = {SCOPE_MARKER: "read"}
"""`openapi_extra=READS` on a POST route that only reads (recall, context, rewrite): a
read-only key may call it. Every other route's scope follows from its method."""

UNGATED_ROUTES: frozenset[str] = frozenset(
    f"{method} /v1/memories/feedback" for method in ("GET", "PUT", "PATCH", "DELETE")
)
"""/v1 routes that intentionally answer without the gate, as "METHOD /path" (a 405 that
holds nothing;
`tests/unit/test_gate.py` fails on any /v1 route that is neither gated nor listed here)."""


# The dependencies below that only hand out a service are `async def` on purpose: FastAPI
# runs a plain `def` dependency in its thread pool, a thread hop per dependency per request.
def _services(request: Request) -> Services:
    services: Services = request.state.services
    return services


_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <api key>`")


async def authorize(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The gate: who is calling, and whether they may make this request.

    401 without a valid key; 429 when the key's bucket is empty; 403 without the route's
    scope, or when a key bound to a user names another user (or none) in the path, the query
    or the JSON body. An open server skips all of it (loopback callers only, unless open was
    chosen explicitly).
    """
    keys: KeyService = _services(request).keys
    if keys.mode != "keys":
        # No peer address: a Unix socket, which is this machine too.
        host = request.client.host if request.client else "127.0.0.1"
        if keys.mode == "loopback" and not is_loopback(host):
            raise LoopbackOnly(
                "this server runs without API keys and answers callers on its own machine "
                "only; create a key or set STRATA_API_KEY to serve others"
            )
        return keys.open_principal()
    principal = await keys.authenticate(credentials.credentials if credentials else None)
    await keys.limit(principal)
    route = request.scope.get("route")
    declared = (getattr(route, "openapi_extra", None) or {}).get(SCOPE_MARKER)
    needed = required_scope(request.method, getattr(route, "path", request.url.path), declared)
    if needed not in principal.scopes:
        raise InsufficientScope(needed, format_scopes(principal.scopes))
    if principal.user_id is not None:
        named = await _named_users(request)
        if not named:
            raise UserNotAllowed(
                f"this key is bound to user {principal.user_id!r}: the request must name "
                "that user (`user_id`)"
            )
        foreign = foreign_users(principal.user_id, named)
        if foreign:
            raise UserNotAllowed(
                f"this key is bound to user {principal.user_id!r}, not {foreign[0]!r}"
            )
    return principal


async def _named_users(request: Request) -> list[object]:
    """Every `user_id` the request names: the path's, each in the query, and the JSON body's
    (top level, or in the objects of a top-level list). The body is the one the route reads:
    Starlette caches it, and its parsed JSON, on the request."""
    named: list[object] = []
    if "user_id" in request.path_params:
        named.append(request.path_params["user_id"])
    named.extend(request.query_params.getlist("user_id"))
    if request.method not in ("GET", "HEAD", "OPTIONS") and await request.body():
        try:
            data = await request.json()
        except ValueError:
            data = None  # not JSON: the route refuses the body itself
        items = data if isinstance(data, list) else [data]
        named.extend(
            item["user_id"] for item in items if isinstance(item, dict) and "user_id" in item
        )
    return named


PrincipalDep = Annotated[Principal, Depends(authorize)]


async def _tenant(principal: PrincipalDep) -> str:
    return principal.tenant_id


TenantDep = Annotated[str, Depends(_tenant)]


async def _keys(request: Request) -> KeyService:
    return _services(request).keys


KeyDep = Annotated[KeyService, Depends(_keys)]


async def _ingest(request: Request) -> IngestService:
    return _services(request).ingest


async def _memories(request: Request) -> MemoryService:
    return _services(request).memories


async def _recall(request: Request) -> RecallService:
    return _services(request).recall


async def _context(request: Request) -> ContextService:
    return _services(request).context


async def _health(request: Request) -> HealthService:
    return _services(request).health


async def _jobs(request: Request) -> JobService:
    return _services(request).jobs


IngestDep = Annotated[IngestService, Depends(_ingest)]
MemoryDep = Annotated[MemoryService, Depends(_memories)]
RecallDep = Annotated[RecallService, Depends(_recall)]
ContextDep = Annotated[ContextService, Depends(_context)]
HealthDep = Annotated[HealthService, Depends(_health)]
JobDep = Annotated[JobService, Depends(_jobs)]


async def _rewrite(request: Request) -> RewriteService:
    return _services(request).rewrite


RewriteDep = Annotated[RewriteService, Depends(_rewrite)]


async def _scratchpad(request: Request) -> ScratchpadService:
    return _services(request).scratchpad


ScratchpadDep = Annotated[ScratchpadService, Depends(_scratchpad)]


async def _summaries(request: Request) -> SummaryService:
    return _services(request).summaries


SummaryDep = Annotated[SummaryService, Depends(_summaries)]


async def _export(request: Request) -> ExportService:
    return _services(request).export


async def _erasure(request: Request) -> ErasureService:
    return _services(request).erasure


ExportDep = Annotated[ExportService, Depends(_export)]
ErasureDep = Annotated[ErasureService, Depends(_erasure)]


async def _forgetting(request: Request) -> ForgettingService:
    return _services(request).forgetting


ForgettingDep = Annotated[ForgettingService, Depends(_forgetting)]


async def _maintenance(request: Request) -> MaintenanceService:
    return _services(request).maintenance


MaintenanceDep = Annotated[MaintenanceService, Depends(_maintenance)]


async def _profile(request: Request) -> ProfileService:
    return _services(request).profile


async def _graph(request: Request) -> GraphService:
    return _services(request).graph


ProfileDep = Annotated[ProfileService, Depends(_profile)]
GraphDep = Annotated[GraphService, Depends(_graph)]

SessionIdPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=128,
        pattern=ID_PATTERN,
        description=ID_RULES,
        examples=["session-1"],
    ),
]
UserIdQuery = Annotated[
    str,
    Query(
        min_length=1, max_length=128, pattern=ID_PATTERN, description=ID_RULES, examples=["user-42"]
    ),
]
LimitQuery = Annotated[int, Query(ge=1, le=200, description="page size")]
UserIdPath = Annotated[
    str,
    Path(
        min_length=1, max_length=128, pattern=ID_PATTERN, description=ID_RULES, examples=["user-42"]
    ),
]
