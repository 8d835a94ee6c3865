"""Types shared by every request and response: identifiers, content, times, problems."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints

Identifier = Annotated[
    str,
    StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:@-]+$"),
    Field(examples=["user-42"]),
]

MAX_FUTURE = timedelta(minutes=5)


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


def _not_future(value: datetime) -> datetime:
    if value - datetime.now(UTC) > MAX_FUTURE:
        raise ValueError("must not lie more than 5 minutes in the future")
    return value.astimezone(UTC)


Content = Annotated[
    str, StringConstraints(min_length=1, max_length=32_000), AfterValidator(_not_blank)
]
Query = Annotated[
    str, StringConstraints(min_length=1, max_length=4_000), AfterValidator(_not_blank)
]
EventTime = Annotated[AwareDatetime, AfterValidator(_not_future)]
"""A time with an offset, at most 5 minutes ahead; stored as UTC."""

Metadata = Annotated[
    dict[str, Any],
    Field(max_length=64, description="free-form JSON object, up to 64 keys"),
]


class StrictModel(BaseModel):
    """Request bodies: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class Source(BaseModel):
    """A message a memory came from: `message_id` is the client's id, else `seq:<n>`."""

    session_id: str
    message_id: str
    seq: int


class Problem(BaseModel):
    """RFC 9457 problem details, with a stable `code` and the request id."""

    type: str = Field(examples=["https://strata.dev/problems/validation_error"])
    title: str
    status: int
    detail: str
    code: str = Field(examples=["validation_error"])
    request_id: str
    errors: list[dict[str, Any]] | None = None


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error answers a route can give."""
    titles = {
        401: "Missing or invalid API key",
        404: "Not found (or belongs to another user)",
        409: "Conflict",
        422: "Invalid request; `errors` names each field",
        503: "A dependency is unavailable",
        504: "An upstream provider timed out",
    }
    return {
        s: {
            "model": Problem,
            "description": titles[s],
            "content": {"application/problem+json": {}},
        }
        for s in statuses
    }
