"""One place that turns every failure into RFC 9457 problem+json with a request id."""

from __future__ import annotations

import contextvars
import logging
import socket
import uuid
from collections.abc import Mapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from redis.exceptions import RedisError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as SATimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import (
    HTTP_ERRORS,
    AppError,
    BadRequest,
    BufferUnavailable,
    DatabaseUnavailable,
    InternalError,
    InvalidInput,
)

log = logging.getLogger("strata.api")

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

UNEXPECTED = "an unexpected error occurred"


class ProblemResponse(Response):
    media_type = "application/problem+json"

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
    body: dict[str, Any] = {
        "type": f"urn:strata:problem:{kind.code}",
        "title": kind.title,
        "status": status or kind.status,
        "detail": detail,
        "code": kind.code,
        "request_id": request_id_var.get(),
    }
    if errors is not None:
        body["errors"] = errors
    return ProblemResponse(body, status_code=body["status"], headers=headers)


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]  # where it came from, not which field
    return ".".join(parts) or "body"


async def _app_error(_: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, AppError)
    if exc.status >= 500:
        log.warning("%s: %s", exc.code, exc.detail)
    return problem(type(exc), exc.detail, errors=exc.errors)


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
    detail = "; ".join(f"{e['field']}: {e['msg']}" for e in errors[:5])
    return problem(InvalidInput, detail, errors=errors)


async def _http_error(_: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, StarletteHTTPException)
    kind = HTTP_ERRORS.get(exc.status_code) or (
        InternalError if exc.status_code >= 500 else BadRequest
    )
    # Keep the exception's headers: a 405 must say what is allowed (`Allow`).
    return problem(kind, str(exc.detail), status=exc.status_code, headers=exc.headers)


def _transient(exc: DBAPIError) -> bool:
    """Deadlock or serialisation (40), statement timeout or shutdown (57), connection (08):
    the request may succeed if retried, so it is a 503, not our 500."""
    code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
    return isinstance(code, str) and code[:2] in ("40", "57", "08")


async def _store_down(_: Request, exc: Exception) -> ProblemResponse:
    if (
        isinstance(exc, DBAPIError)
        and not isinstance(exc, OperationalError | InterfaceError)
        and not exc.connection_invalidated
        and exc.statement is not None
        and not _transient(exc)
    ):
        # A statement the database refused is our bug, not an outage.
        log.exception("database error", exc_info=exc)
        return problem(InternalError, UNEXPECTED)
    log.warning("store unavailable: %s", exc)
    if isinstance(exc, RedisError):
        return problem(BufferUnavailable, str(exc)[:200])
    return problem(DatabaseUnavailable, type(exc).__name__)


async def _unexpected(_: Request, exc: Exception) -> ProblemResponse:
    log.exception("unhandled error", exc_info=exc)
    return problem(InternalError, UNEXPECTED)


def install(app: FastAPI) -> None:
    app.add_exception_handler(AppError, _app_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    # Outages of a store are 503s a client may retry, not 500s.
    for exc_type in (
        DBAPIError,
        SATimeoutError,
        ConnectionError,
        TimeoutError,
        socket.gaierror,
        RedisError,
    ):
        app.add_exception_handler(exc_type, _store_down)
    app.add_exception_handler(Exception, _unexpected)
    app.add_middleware(RequestIdMiddleware)
