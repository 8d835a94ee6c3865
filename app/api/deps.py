"""Dependencies of the routes: the gate (who is calling, and may they), and the services,
as `Annotated` aliases of one generic getter (`service`).

`TenantDep` is the gate: every /v1 route takes it (a test walks the routes), and with it the
key check, the scope, the user binding and the rate limit (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
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
from app.errors import InsufficientScope, LoopbackOnly, UnsupportedMediaType, UserNotAllowed
from app.schemas.common import ID_PATTERN, ID_RULES
from app.services.context import ContextService
from app.services.directory import DirectoryService
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
    chosen explicitly). Then, for whoever passed: 415 for a body that is not JSON.
    """
    principal = await _principal(request, credentials)
    await _json_body_only(request)
    return principal


async def _principal(
    request: Request, credentials: HTTPAuthorizationCredentials | None
) -> Principal:
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


def is_json(content_type: str | None) -> bool:
    """`application/json` or `application/<anything>+json` (merge-patch), parameters such as
    `charset` aside: the media types FastAPI reads a body as JSON for."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    kind, _, subtype = media.partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


async def _json_body_only(request: Request) -> None:
    """415 for a body a route would read as JSON sent as something else (`text/plain`, XML,
    a form, no content type): FastAPI leaves such a body unparsed, and its answer was a 422
    that blamed the fields. Every route with a body passes here, being gated; an empty body
    is no body (a 422 when the route needs one)."""
    route = request.scope.get("route")
    if getattr(route, "body_field", None) is None or not await request.body():
        return
    content_type = request.headers.get("content-type")
    if not is_json(content_type):
        raise UnsupportedMediaType(
            f"the body must be JSON (`Content-Type: application/json`), not "
            f"{content_type or 'without a content type'}"
        )


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


# `get` below is `async def` on purpose: FastAPI runs a plain `def` dependency in its thread
# pool, a thread hop per dependency per request (tests/unit/test_deps.py).
def service(name: str) -> Callable[[Request], Awaitable[Any]]:
    """The dependency that hands out the service `name` of `request.state.services` (the
    container's, app/wiring.py). A name `Services` does not have fails at import."""
    if name not in Services.__dataclass_fields__:
        raise ValueError(f"no service {name!r} in app.wiring.Services")

    async def get(request: Request) -> Any:
        return getattr(_services(request), name)

    get.__qualname__ = get.__name__ = f"service_{name}"
    return get


KeyDep = Annotated[KeyService, Depends(service("keys"))]
IngestDep = Annotated[IngestService, Depends(service("ingest"))]
MemoryDep = Annotated[MemoryService, Depends(service("memories"))]
RecallDep = Annotated[RecallService, Depends(service("recall"))]
ContextDep = Annotated[ContextService, Depends(service("context"))]
HealthDep = Annotated[HealthService, Depends(service("health"))]
JobDep = Annotated[JobService, Depends(service("jobs"))]
RewriteDep = Annotated[RewriteService, Depends(service("rewrite"))]
ScratchpadDep = Annotated[ScratchpadService, Depends(service("scratchpad"))]
SummaryDep = Annotated[SummaryService, Depends(service("summaries"))]
ExportDep = Annotated[ExportService, Depends(service("export"))]
ErasureDep = Annotated[ErasureService, Depends(service("erasure"))]
ForgettingDep = Annotated[ForgettingService, Depends(service("forgetting"))]
MaintenanceDep = Annotated[MaintenanceService, Depends(service("maintenance"))]
ProfileDep = Annotated[ProfileService, Depends(service("profile"))]
GraphDep = Annotated[GraphService, Depends(service("graph"))]
DirectoryDep = Annotated[DirectoryService, Depends(service("directory"))]

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
