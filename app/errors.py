"""The one error tree of the service, and with it the registry of every problem `code`.

Each concrete class declares its HTTP status, a stable `code` a client can branch on, a
title, and a one-line description that the OpenAPI document lists under each route's
responses. Stores and services raise these (routes never raise HTTP exceptions);
`app.api.errors` renders them as RFC 9457 problem+json with the request id. A code is
spelled once, here: `registered()` enumerates them all.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

_REGISTRY: dict[str, type[AppError]] = {}


class AppError(Exception):
    """Base of every error a caller may see. `detail` is for humans; the class is the rest.

    A subclass is registered under its `code` unless it is `abstract` (a family such as
    `Unavailable`, never raised itself); a concrete class declares its own code, title and
    description, so that no two classes share a code by inheritance.
    """

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    title: ClassVar[str] = "Internal server error"
    description: ClassVar[str] = ""

    def __init_subclass__(cls, *, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if abstract:
            return
        missing = [a for a in ("code", "title", "description") if a not in vars(cls)]
        if missing:
            raise TypeError(f"{cls.__name__} must declare {', '.join(missing)}")
        if cls.code in _REGISTRY:
            raise TypeError(f"code {cls.code!r} of {cls.__name__} is already registered")
        _REGISTRY[cls.code] = cls

    def __init__(
        self,
        detail: str | None = None,
        *,
        errors: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        if _REGISTRY.get(self.code) is not type(self):
            # A family (or the base) has no code of its own: raise one of its members.
            raise TypeError(f"{type(self).__name__} is abstract; raise a registered error")
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.errors = errors
        self.headers = headers  # e.g. `WWW-Authenticate` of a 401, `Retry-After` of a 429


def registered() -> list[type[AppError]]:
    """Every problem a caller may see, by status then code."""
    return sorted(_REGISTRY.values(), key=lambda cls: (cls.status, cls.code))


# 4xx: the caller can fix the request.


class BadRequest(AppError):
    status = 400
    code = "bad_request"
    title = "Bad request"
    description = "The body cannot be read: not JSON, or not UTF-8."


class Unauthorized(AppError):
    status = 401
    code = "unauthorized"
    title = "Missing or invalid API key"
    description = (
        "Send `Authorization: Bearer <api key>`: the key is missing, malformed, unknown or "
        "revoked (`WWW-Authenticate: Bearer` says so)."
    )

    def __init__(self, detail: str | None = None, *, invalid: bool = False) -> None:
        # RFC 6750 §3: no error code when no key was sent; `invalid_token` for a bad one.
        error = ' error="invalid_token"' if invalid else ""
        super().__init__(detail, headers={"WWW-Authenticate": f'Bearer realm="strata"{error}'})


class Forbidden(AppError):
    status = 403
    code = "forbidden"
    title = "Forbidden"
    description = "The credentials do not allow this request."


class InsufficientScope(Forbidden):
    code = "insufficient_scope"
    title = "The key lacks the scope"
    description = "The key does not hold the scope this route needs (read, write or admin)."

    def __init__(self, needed: str, held: str) -> None:
        super().__init__(
            f"this request needs scope {needed!r}; the key holds {held or 'none'}",
            headers={
                "WWW-Authenticate": f'Bearer realm="strata" error="insufficient_scope" '
                f'scope="{needed}"'
            },
        )


class UserNotAllowed(Forbidden):
    code = "user_not_allowed"
    title = "The key is bound to another user"
    description = (
        "The key is bound to one user, and the request names another (in its path, query or "
        "body) or names none."
    )


class LoopbackOnly(Forbidden):
    code = "loopback_only"
    title = "Open server answers loopback only"
    description = (
        "The server runs without keys (embedded default) and answers callers on this "
        "machine only: create a key or set STRATA_API_KEY to serve others."
    )


class NotFound(AppError):
    status = 404
    code = "not_found"
    title = "Not found"
    description = "No route at this path."


class SessionNotFound(NotFound):
    code = "session_not_found"
    title = "Session not found"
    description = "No session with this id belongs to this user."

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r} for this user")


class MemoryNotFound(NotFound):
    code = "memory_not_found"
    title = "Memory not found"
    description = "No memory with this id belongs to this user."

    def __init__(self, memory_id: uuid.UUID) -> None:
        super().__init__(f"no memory {memory_id} for this user")


class KeyNotFound(NotFound):
    code = "key_not_found"
    title = "Key not found"
    description = "No key with this id belongs to this tenant."

    def __init__(self, key_id: uuid.UUID) -> None:
        super().__init__(f"no key {key_id}")


class UserNotFound(NotFound):
    code = "user_not_found"
    title = "User not found"
    description = "Nothing is held about this user: never seen, erased, or being erased."

    def __init__(self, user_id: str) -> None:
        super().__init__(f"nothing is held about user {user_id!r}")


class EntityNotFound(NotFound):
    code = "entity_not_found"
    title = "Entity not found"
    description = "No entity of this name (or id) in this user's knowledge graph."

    def __init__(self, entity: str) -> None:
        super().__init__(f"no entity {entity!r} in this user's graph")


class MethodNotAllowed(AppError):
    status = 405
    code = "method_not_allowed"
    title = "Method not allowed"
    description = "The path exists, but not with this method; `Allow` lists those that do."


class Conflict(AppError, abstract=True):
    status = 409
    title = "Conflict"


class JobNotFound(NotFound):
    code = "job_not_found"
    title = "Job not found"
    description = "No job with this id belongs to this tenant."

    def __init__(self, job_id: object) -> None:
        super().__init__(f"no job {job_id}")


class JobNotFailed(Conflict):
    code = "job_not_failed"
    title = "Job is not failed"
    description = "Only a job in the `failed` state can be re-run."

    def __init__(self, job_id: object, state: str) -> None:
        super().__init__(f"job {job_id} is {state}; only a failed job can be re-run")


class UserErasureInProgress(Conflict):
    code = "user_erasure_in_progress"
    title = "The user is being erased"
    description = (
        "An erasure of this user is running; nothing can be written for them until it ends "
        "(`GET /v1/jobs/{job_id}`)."
    )

    def __init__(self, user_id: str, job_id: object) -> None:
        super().__init__(f"user {user_id!r} is being erased (job {job_id}); retry once it ends")


class MemoryNotForgotten(Conflict):
    code = "memory_not_forgotten"
    title = "Memory is not forgotten"
    description = "Only a memory the forgetting sweep removed can be restored."

    def __init__(self, memory_id: uuid.UUID) -> None:
        super().__init__(f"memory {memory_id} is not forgotten; there is nothing to restore")


class MemoryPurged(AppError):
    status = 410
    code = "memory_purged"
    title = "Memory purged"
    description = "The memory was forgotten and its grace period is over: its content is gone."

    def __init__(self, memory_id: uuid.UUID) -> None:
        super().__init__(f"memory {memory_id} was forgotten and purged; it cannot be restored")


class PayloadTooLarge(AppError):
    status = 413
    code = "payload_too_large"
    title = "Payload too large"
    description = "The body is larger than the server accepts."


class ScratchpadTooLarge(PayloadTooLarge):
    code = "scratchpad_too_large"
    title = "Scratchpad too large"
    description = "The scratchpad's `data`, serialised as JSON, exceeds the server's limit."

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"data serialises to {size} bytes of JSON; the limit is {limit}")


class RequestTooLarge(PayloadTooLarge):
    code = "request_too_large"
    title = "Request too large"
    description = (
        "The body is larger than `STRATA_MAX_BODY_BYTES` (default 2 MiB, 2,097,152 bytes), "
        "by its `Content-Length` or as streamed."
    )

    def __init__(self, limit: int) -> None:
        super().__init__(f"the body is over the limit of {limit} bytes")


class TooManyCharacters(PayloadTooLarge):
    code = "too_many_characters"
    title = "Too many characters"
    description = (
        "The messages' `content` adds up to more than `STRATA_INGEST_MAX_CHARS` characters "
        "(default 200,000) in one request; send them in several."
    )

    def __init__(self, total: int, limit: int) -> None:
        super().__init__(
            f"the messages hold {total} characters of content; one request may hold {limit}",
            errors=[
                {
                    "loc": ["body", "messages"],
                    "field": "messages",
                    "msg": f"at most {limit} characters of content in total",
                    "type": "too_many_characters",
                }
            ],
        )


class RateLimited(AppError):
    status = 429
    code = "rate_limited"
    title = "Too many requests"
    description = "The key's rate limit is spent; `Retry-After` says when to try again."

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            f"the key's rate limit is spent; retry in {retry_after} s",
            headers={"Retry-After": str(retry_after)},
        )


class ProfileTooLarge(PayloadTooLarge):
    code = "profile_too_large"
    title = "Profile too large"
    description = "The profile's attributes after the patch exceed the server's limit."

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"attributes serialise to {size} bytes of JSON; the limit is {limit}")


class UnsupportedMediaType(AppError):
    status = 415
    code = "unsupported_media_type"
    title = "Unsupported media type"
    description = "The body's content type is not one this route reads."


class InvalidInput(AppError):
    """A request that breaks the schema or a rule; `errors` names each field."""

    status = 422
    code = "validation_error"
    title = "Invalid request"
    description = "A field breaks the schema or a rule; `errors` names each field."

    def __init__(self, field: str, message: str, *, source: str = "body") -> None:
        loc = field.split(".")
        super().__init__(
            f"{field}: {message}",
            errors=[{"loc": [source, *loc], "field": field, "msg": message}],
        )


class InvalidCursor(InvalidInput):
    code = "invalid_cursor"
    title = "Invalid cursor"
    description = "`cursor` is not one this API returned."

    def __init__(self) -> None:
        super().__init__("cursor", "is not a cursor this API returned", source="query")


class TokenBudgetTooSmall(InvalidInput):
    code = "token_budget_too_small"
    title = "Token budget too small"
    description = (
        "The system prompt alone, with the bare minimum of the last user message (its "
        "speaker and an ellipsis), exceeds `token_budget`."
    )


class PeriodNotStarted(InvalidInput):
    code = "period_not_started"
    title = "Period not started"
    description = "`period_start` names a period that has not begun in the user's timezone."

    def __init__(self, day: object) -> None:
        super().__init__("period_start", f"the period of {day} has not started yet")


class EmbeddingRejected(AppError):
    status = 422
    code = "embedding_rejected"
    title = "The embedding provider refused the text"
    description = "The embedding provider refuses this text (too long for its model, say)."


# 5xx: the server or a dependency failed; retrying later may succeed.


class InternalError(AppError):
    status = 500
    code = "internal_error"
    title = "Internal server error"
    description = "An unexpected error; the server's log has it under the request id."


class Unavailable(AppError, abstract=True):
    """An upstream store or provider failed; the request stored nothing it reports."""

    status = 503
    title = "A dependency is unavailable"


class DatabaseUnavailable(Unavailable):
    code = "database_unavailable"
    title = "The database is unavailable"
    description = "The database is unreachable, or aborted the transaction; retry later."


class BufferUnavailable(Unavailable):
    code = "buffer_unavailable"
    title = "The buffer is unavailable"
    description = "Redis, the session buffer, is unreachable; retry later."


class VectorStoreUnavailable(Unavailable):
    code = "vector_store_unavailable"
    title = "The vector store is unavailable"
    description = "Qdrant, the vector index, is unreachable; nothing was stored; retry later."


class ProviderUnavailable(Unavailable):
    code = "provider_unavailable"
    title = "The embedding provider is unavailable"
    description = "The embedding provider failed or refused the server's key; retry later."


class ProviderTimeout(Unavailable):
    status = 504
    code = "provider_timeout"
    title = "An upstream provider timed out"
    description = "The embedding provider did not answer in time; retry later."


HTTP_ERRORS: dict[int, type[AppError]] = {
    cls.status: cls
    for cls in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        PayloadTooLarge,
        UnsupportedMediaType,
        InvalidInput,
        InternalError,
    )
}
"""The problem of each status the HTTP layer itself raises (no route, wrong method...)."""
