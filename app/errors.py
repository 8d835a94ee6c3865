"""The one error tree of the service, rendered as RFC 9457 problem+json by one handler.

Services raise these; routes never raise HTTP exceptions. Every problem carries a stable
`code` a client can branch on and the `request_id` that ties it to the server's log.
"""

from __future__ import annotations

from typing import Any


class AppError(Exception):
    """Base of every error a caller may see. `code` is stable; `detail` is for humans."""

    status: int = 500
    code: str = "internal_error"
    title: str = "Internal server error"

    def __init__(
        self,
        detail: str | None = None,
        *,
        errors: list[dict[str, Any]] | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.errors = errors
        if code is not None:
            self.code = code


class NotFound(AppError):
    status, code, title = 404, "not_found", "Not found"


class Conflict(AppError):
    status, code, title = 409, "conflict", "Conflict"


class InvalidInput(AppError):
    """A request that passed schema validation but breaks a rule; names the field."""

    status, code, title = 422, "validation_error", "Invalid request"

    def __init__(self, field: str, message: str, *, code: str | None = None) -> None:
        loc = field.split(".")
        super().__init__(
            f"{field}: {message}",
            errors=[{"loc": ["body", *loc], "field": field, "msg": message}],
            code=code,
        )


class EmbeddingRejected(AppError):
    """The embedding provider refuses this text (too long for its model, say)."""

    status, code, title = 422, "embedding_rejected", "The embedding provider refused the text"


class Unauthorized(AppError):
    status, code, title = 401, "unauthorized", "Missing or invalid API key"


class Unavailable(AppError):
    """An upstream store or provider failed; the request stored nothing it reports."""

    status, code, title = 503, "unavailable", "A dependency is unavailable"


class VectorStoreUnavailable(Unavailable):
    code = "vector_store_unavailable"
    title = "The vector store is unavailable"


class DatabaseUnavailable(Unavailable):
    code = "database_unavailable"
    title = "The database is unavailable"


class ProviderTimeout(Unavailable):
    status, code, title = 504, "provider_timeout", "An upstream provider timed out"
