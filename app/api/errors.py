"""One place that turns every failure into RFC 9457 problem+json with a request id, and
documents those answers in the OpenAPI document, from the registry in `app.errors`.

Stores translate their drivers' failures into `AppError`s at their boundary, so the
handlers here need not guess which store an exception came from: an `AppError` is rendered
as it says, anything else is a 500.
"""

from __future__ import annotations

import http
import logging
import uuid
from collections.abc import Mapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.auth import SCOPE_MARKER, required_scope
from app.errors import (
    HTTP_ERRORS,
    AppError,
    BadRequest,
    DatabaseUnavailable,
    InsufficientScope,
    InternalError,
    InvalidInput,
    LoopbackOnly,
    MethodNotAllowed,
    RateLimited,
    RequestTooLarge,
    Unauthorized,
    UnsupportedMediaType,
    UserNotAllowed,
    registered,
)
from app.logs import request_id_var
from app.schemas.common import Problem

log = logging.getLogger("strata.api")

PROBLEM_JSON = "application/problem+json"
UNEXPECTED = "an unexpected error occurred"


class ProblemResponse(Response):
    media_type = PROBLEM_JSON

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class RequestIdMiddleware:
    """Takes `X-Request-ID` from the caller (or makes one) and returns it on every answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        rid = given if 0 < len(given) <= 128 and given.isprintable() else uuid.uuid4().hex
        token = request_id_var.set(rid)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", rid.encode())]
            await send(message)

        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send_with_id(message)

        try:
            await self.app(scope, receive, send_tracked)
        except Exception as exc:
            # Rendered here, inside the request id's scope, so even a 500 carries it.
            log.exception("unhandled error", exc_info=exc)
            if started:
                raise
            await problem(InternalError, UNEXPECTED)(scope, receive, send_with_id)
        finally:
            request_id_var.reset(token)


def problem(
    kind: type[AppError],
    detail: str,
    *,
    errors: list[dict[str, Any]] | None = None,
    status: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> ProblemResponse:
    """The answer for a problem of `kind`; `status` only for an HTTP status the registry
    has no class of its own for."""
    body = Problem.model_validate(
        {
            "type": f"urn:strata:problem:{kind.code}",
            "title": kind.title,
            "status": status or kind.status,
            "detail": detail,
            "code": kind.code,
            "request_id": request_id_var.get() or "-",
            "errors": errors,
        }
    )
    return ProblemResponse(
        body.model_dump(mode="json", exclude_none=True),
        status_code=body.status,
        headers=headers,
    )


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]  # where it came from, not which field
    return ".".join(parts) or "body"


async def _app_error(_: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, AppError)
    if exc.status >= 500:
        # The cause (a driver's or client's own error) goes to the log, not to the caller.
        log.warning("%s: %s (%r)", exc.code, exc.detail, exc.__cause__)
    return problem(type(exc), exc.detail, errors=exc.errors, headers=exc.headers)


async def _validation_error(_: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {
            "loc": list(e.get("loc", ())),
            "field": _field(e.get("loc", ())),
            "msg": e.get("msg", ""),
            "type": e.get("type", ""),
        }
        for e in exc.errors()
    ]
    syntax = next((e for e in exc.errors() if e.get("type") == "json_invalid"), None)
    if syntax is not None:
        # FastAPI reports a body that is not JSON as a validation error; it is a body that
        # cannot be read at all, so the documented 400, with where the parser stopped.
        loc = list(syntax.get("loc", ()))
        reason = syntax.get("ctx", {}).get("error", "")
        errors = [{"loc": loc, "field": "body", "msg": reason, "type": "json_invalid"}]
        where = f" at character {loc[-1]}" if len(loc) > 1 else ""
        return problem(BadRequest, f"the body is not JSON: {reason}{where}", errors=errors)
    detail = "; ".join(f"{e['field']}: {e['msg']}" for e in errors[:5])
    return problem(InvalidInput, detail, errors=errors)


async def _http_error(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, StarletteHTTPException)
    kind = HTTP_ERRORS.get(exc.status_code) or (
        InternalError if exc.status_code >= 500 else BadRequest
    )
    detail = str(exc.detail)
    if isinstance(exc.__cause__, UnicodeDecodeError):  # FastAPI's "error parsing the body"
        detail = "the body is not UTF-8"
    # Keep the exception's headers: a 405 must say what is allowed (`Allow`).
    headers = dict(exc.headers or {})
    if kind is MethodNotAllowed:
        # Starlette names the methods of the first route whose path matched; a path served
        # by several routes (GET, PUT and DELETE of a session) allows all of theirs.
        allowed = _allowed_methods(request)
        headers["Allow"] = ", ".join(allowed)
        detail = f"{request.method} is not allowed here; use {', '.join(allowed)}"
    return problem(kind, detail, status=exc.status_code, headers=headers or None)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allowed_methods(request: Request) -> list[str]:
    """The methods some route serves at this path: each is asked whether it would match
    the path with that method (a bare scope, free of what routing this request left)."""
    allowed = []
    for method in _METHODS:
        probe: Scope = {
            "type": "http",
            "method": method,
            "path": request.scope["path"],
            "root_path": request.scope.get("root_path", ""),
            "headers": [],
            "query_string": b"",
        }
        if any(route.matches(dict(probe))[0] is Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    # A hidden route at this very path (a 405 that keeps a literal path such as
    # `/v1/memories/feedback` from reaching a `{memory_id}` route) allows nothing.
    hidden = {
        method
        for context in iter_route_contexts(request.app.routes)
        if context.path == request.scope["path"]
        and not getattr(context.original_route, "include_in_schema", True)
        for method in context.methods or ()
    }
    return [method for method in allowed if method not in hidden]


async def _unexpected(_: Request, exc: Exception) -> ProblemResponse:
    log.exception("unhandled error", exc_info=exc)
    return problem(InternalError, UNEXPECTED)


def install(app: FastAPI) -> None:
    app.add_exception_handler(AppError, _app_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
    app.add_middleware(RequestIdMiddleware)
    _document_problems(app)


# The OpenAPI side: what each route may answer, generated from the registry.

COMMON_PROBLEMS: tuple[type[AppError], ...] = (
    Unauthorized,
    RequestTooLarge,
    InsufficientScope,
    UserNotAllowed,
    LoopbackOnly,
    InvalidInput,
    RateLimited,
    InternalError,
    DatabaseUnavailable,
)
"""What any /v1 route may answer: every one passes the gate (key, scope, user binding, rate
limit), checks the body's size, validates, and reads SQL."""

_EXAMPLE_REQUEST_ID = "9f1c2e4b7a8d4e0f9b6a3c5d2e1f0a7b"
_EXAMPLE_ERRORS = [
    {"loc": ["body", "query"], "field": "query", "msg": "Field required", "type": "missing"}
]


def problem_responses(*problems: type[AppError]) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a /v1 route: the problems it may answer besides the common ones
    (a route with a body lists `BadRequest`), grouped by status, each status naming its
    codes and giving an example of each."""
    by_status: dict[int, list[type[AppError]]] = {}
    for kind in (*problems, *COMMON_PROBLEMS):
        kinds = by_status.setdefault(kind.status, [])
        if kind not in kinds:
            kinds.append(kind)
    return {status: _response(status, kinds) for status, kinds in sorted(by_status.items())}


def _response(status: int, kinds: list[type[AppError]]) -> dict[str, Any]:
    codes = "\n".join(f"- `{kind.code}`: {kind.description}" for kind in kinds)
    return {
        "description": f"{http.HTTPStatus(status).phrase}; `code` is one of:\n\n{codes}",
        "content": {
            PROBLEM_JSON: {
                "schema": {"$ref": "#/components/schemas/Problem"},
                "examples": {
                    kind.code: {"$ref": f"#/components/examples/{kind.code}"} for kind in kinds
                },
            }
        },
    }


def _example(kind: type[AppError]) -> dict[str, Any]:
    value: dict[str, Any] = {
        "type": f"urn:strata:problem:{kind.code}",
        "title": kind.title,
        "status": kind.status,
        "detail": kind.description,
        "code": kind.code,
        "request_id": _EXAMPLE_REQUEST_ID,
    }
    if kind is InvalidInput:
        value["detail"] = "query: Field required"
        value["errors"] = _EXAMPLE_ERRORS
    return {"summary": kind.title, "value": value}


def _document_problems(app: FastAPI) -> None:
    """Add `Problem` to the document's schemas and an example of each registered problem:
    the routes' responses refer to both under `application/problem+json`, which FastAPI's
    `model=` cannot express (it documents a route's own media type, `application/json`)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        spec = app.openapi_schema
        if spec is None:
            spec = generate()  # which FastAPI caches, so this runs once
            problem_schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
            components = spec.setdefault("components", {})
            schemas = {
                **components.get("schemas", {}),
                **problem_schema.pop("$defs", {}),
                "Problem": problem_schema,
            }
            components["schemas"] = dict(sorted(schemas.items()))
            components["examples"] = {kind.code: _example(kind) for kind in registered()}
            _document_scopes(spec)
            _document_media_types(spec)
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


def _document_scopes(spec: dict[str, Any]) -> None:
    """Each /v1 operation says which key scope it needs (`x-strata-scope`), by the gate's
    own rule (docs/security.md)."""
    for path, operations in spec.get("paths", {}).items():
        if not path.startswith("/v1"):
            continue
        for method, operation in operations.items():
            declared = operation.get(SCOPE_MARKER)
            operation[SCOPE_MARKER] = required_scope(method, path, declared)


def _document_media_types(spec: dict[str, Any]) -> None:
    """Each /v1 operation with a body may answer 415 `unsupported_media_type`: a body that is
    not JSON by its content type (the gate's check, `app/api/deps.py`)."""
    for path, operations in spec.get("paths", {}).items():
        if not path.startswith("/v1"):
            continue
        for operation in operations.values():
            if "requestBody" not in operation:
                continue
            responses = operation.get("responses", {})
            before = [(status, r) for status, r in responses.items() if status < "415"]
            after = [(status, r) for status, r in responses.items() if status > "415"]
            unsupported = ("415", _response(415, [UnsupportedMediaType]))
            operation["responses"] = dict([*before, unsupported, *after])
