"""The request body size limit, as pure ASGI middleware: a body over `max_bytes` is a 413
`request_too_large` whether it declares its length or streams in chunks, and it is never
read into memory past the limit.

It sits inside `RequestIdMiddleware`, so the 413 carries the request id.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import problem
from app.errors import RequestTooLarge


class _Overflow(Exception):
    """Raised into the app from `receive` once the body passes the limit."""


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            # Refused before a byte of the body is read.
            await self._refuse(scope, receive, send)
            return

        received = 0
        overflow = False
        started = False

        async def receive_counted() -> Message:
            nonlocal received, overflow
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    overflow = True
                    raise _Overflow
            return message

        async def send_unless_overflow(message: Message) -> None:
            nonlocal started
            # Whatever the app made of the aborted read (FastAPI turns it into a 400), the
            # answer is the 413, sent below.
            if overflow and not started:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive_counted, send_unless_overflow)
        except Exception:
            if not overflow:
                raise
        if overflow and not started:
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem(RequestTooLarge, RequestTooLarge(self.max_bytes).detail)
        response.headers["connection"] = "close"  # the rest of the body is not read
        await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
