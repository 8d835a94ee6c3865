"""Types shared by every request and response: identifiers, content, times, problems."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any

import orjson
from annotated_types import GroupedMetadata
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
)

from app.errors import InvalidInput

ID_PATTERN = r"^[A-Za-z0-9._:@-]*[A-Za-z0-9_:@-][A-Za-z0-9._:@-]*$"
"""`[A-Za-z0-9._:@-]`, at least one of them not a dot: `.` and `..` are path segments that
clients normalise away (`/v1/users/../export` is `/v1/export`), so an id made of dots alone
could be created but never reached. Checked wherever ids enter: body, query and path."""
ID_RULES = (
    "1-128 characters of `[A-Za-z0-9._:@-]`, not dots alone (`.`, `..` and `...` are a 422: "
    "clients normalise dot segments out of paths)"
)
Identifier = Annotated[
    str,
    StringConstraints(min_length=1, max_length=128, pattern=ID_PATTERN),
    Field(examples=["user-42"], description=ID_RULES),
]

MAX_FUTURE = timedelta(minutes=5)


INT64 = 2**63 - 1
MAX_METADATA_BYTES = 16_000


def _text(value: str) -> str:
    """Text every store can hold: valid UTF-8 (JSON allows lone surrogates; UTF-8 does not)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from exc
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return _text(value)


def _json_value(value: Any, depth: int = 0) -> None:
    if depth > 8:
        raise ValueError("is nested more than 8 levels deep")
    if isinstance(value, str):
        _text(value)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        if not -INT64 - 1 <= value <= INT64:
            raise ValueError("holds an integer outside the 64-bit range")
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("holds a number that is not finite")
        # PostgreSQL's jsonb keeps 1e20 as the integer 100000000000000000000, which came
        # back past what the service serialises (a 500 on the profile's next PATCH).
        if abs(value) > INT64:
            raise ValueError("holds a number outside the 64-bit range")
    elif isinstance(value, list):
        for item in value:
            _json_value(item, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            _text(str(key))
            _json_value(item, depth + 1)


def _metadata(value: dict[str, Any]) -> dict[str, Any]:
    _json_value(value)
    if len(orjson.dumps(value)) > MAX_METADATA_BYTES:
        raise ValueError(f"must serialise to at most {MAX_METADATA_BYTES} bytes of JSON")
    return value


def _json_object(value: dict[str, Any]) -> dict[str, Any]:
    _json_value(value)
    return value


def _utc(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError as exc:  # e.g. year 1 with a positive offset
        raise ValueError("is out of the supported range") from exc


def _not_future(value: datetime) -> datetime:
    utc = _utc(value)
    if utc - datetime.now(UTC) > MAX_FUTURE:
        raise ValueError("must not lie more than 5 minutes in the future")
    return utc


TEXT_RULES = "valid Unicode (no lone surrogates) without NUL characters"


def _document_text(schema: dict[str, Any]) -> None:
    schema["description"] = "; ".join(p for p in (schema.get("description"), TEXT_RULES) if p)


def _document_not_blank(schema: dict[str, Any]) -> None:
    schema["description"] = "; ".join(
        p for p in (schema.get("description"), "not blank", TEXT_RULES) if p
    )


@dataclass(frozen=True)
class Text(GroupedMetadata):
    """The one string type of every text a request stores or looks up, body field or query
    parameter alike: `Annotated[str, Text(256)]`, or `Annotated[str, Text(256), Query()]`.

    Valid Unicode without NUL: PostgreSQL's `text` refuses NUL (a driver error, once a 500)
    where SQLite would store it, so both modes answer 422 naming the field, before anything
    is stored. The bounds are checked first (after `strip`), then the text; the OpenAPI
    description of the field says the rules its schema cannot."""

    max_length: int
    min_length: int = 0
    not_blank: bool = False
    strip: bool = False

    def __iter__(self) -> Iterator[Any]:
        yield StringConstraints(
            min_length=self.min_length or None,
            max_length=self.max_length,
            strip_whitespace=self.strip or None,
        )
        yield AfterValidator(_not_blank if self.not_blank else _text)
        yield Field(json_schema_extra=_document_not_blank if self.not_blank else _document_text)


Content = Annotated[str, Text(32_000, min_length=1, not_blank=True)]
Query = Annotated[str, Text(4_000, min_length=1, not_blank=True)]


_ISO_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


def _iso_string(value: Any) -> Any:
    """Times are ISO-8601 strings only: pydantic would otherwise read a number, or a string
    of digits (a query parameter), as seconds since 1970 (`as_of: 0` is 1970, not an
    error)."""
    if isinstance(value, datetime) or (isinstance(value, str) and _ISO_DATETIME.match(value)):
        return value
    raise ValueError("must be an ISO-8601 time with an offset, e.g. 2025-11-03T10:00:00Z")


_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _iso_date(value: Any) -> Any:
    if isinstance(value, date) or (isinstance(value, str) and _ISO_DATE.match(value)):
        return value
    raise ValueError("must be an ISO-8601 date string, e.g. 2025-11-03")


def _json_integer(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be an integer (a JSON number, not a string or a boolean)")
    return value


# JSON has one number type: 10 and 10.0 are the same integer (as JSON Schema's `integer`
# says); "10" and true are not one, and 10.5 is refused by the integer check itself.
JsonInt = Annotated[int, Strict(False), BeforeValidator(_json_integer)]


def _convertible(value: datetime) -> datetime:
    """A time whose UTC instant exists: `0001-01-01T00:00:00+14:00` parses, but falls
    before year 1 in UTC, and every store and comparison converts it (a 500 once)."""
    _utc(value)
    return value


# A date some days from either end of the calendar: its week, and the day after it, exist.
_FIRST_DATE, _LAST_DATE = date.min + timedelta(days=7), date.max - timedelta(days=8)


def _date_in_range(value: date) -> date:
    if not _FIRST_DATE <= value <= _LAST_DATE:
        raise ValueError(f"is out of the supported range ({_FIRST_DATE} to {_LAST_DATE})")
    return value


# `Strict(False)`: request models are strict, under which pydantic takes a datetime only as
# a Python object; these take the ISO string that JSON carries, and nothing else.
IsoDatetime = Annotated[
    AwareDatetime, Strict(False), BeforeValidator(_iso_string), AfterValidator(_convertible)
]
IsoDate = Annotated[date, Strict(False), BeforeValidator(_iso_date), AfterValidator(_date_in_range)]


def _uuid_string(value: Any) -> Any:
    if isinstance(value, str | uuid.UUID):
        return value
    raise ValueError("must be a UUID string")


Uuid = Annotated[uuid.UUID, Strict(False), BeforeValidator(_uuid_string)]
"""A UUID in a request body (under strict mode, pydantic takes only a Python UUID)."""
EventTime = Annotated[IsoDatetime, AfterValidator(_not_future)]
InstantTime = Annotated[IsoDatetime, AfterValidator(_utc)]
"""A time with an offset; stored as UTC."""
"""A time with an offset, at most 5 minutes ahead; stored as UTC."""

Metadata = Annotated[
    dict[str, Any],
    Field(max_length=64, description="free-form JSON object: up to 64 keys, 16 kB"),
    AfterValidator(_metadata),
]
JsonObject = Annotated[
    dict[str, Any],
    Field(description="a JSON object: valid text, numbers within 64 bits, 8 levels at most"),
    AfterValidator(_json_object),
]
FilterValue = Annotated[
    str
    | Annotated[int, Field(ge=-INT64 - 1, le=INT64), Strict(False), BeforeValidator(_json_integer)]
    | bool,
    AfterValidator(lambda v: _text(v) if isinstance(v, str) else v),
]
METADATA_KEY = r"^[A-Za-z0-9_-]{1,64}$"
MetadataKey = Annotated[
    str,
    StringConstraints(pattern=METADATA_KEY),
    Field(description="a top-level metadata key"),
]


def only_pattern_keys(schema: dict[str, Any]) -> None:
    """`json_schema_extra` of a dict keyed by `MetadataKey`: pydantic documents the key's
    pattern as `patternProperties`, which lets any other key through; the API does not."""
    for sub in schema.get("anyOf", [schema]):
        if sub.get("type") == "object":
            sub["additionalProperties"] = False


class LLMUsage(BaseModel):
    """Tokens an LLM spent on this request (absent when none was called)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    calls: int


class StrictModel(BaseModel):
    """Request bodies: unknown fields are an error, not silently dropped, and JSON types are
    strict: `"10"` is not an integer, `0` not a boolean, a number not a time (`IsoDatetime`,
    `IsoDate`). An integer is still a valid number."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Source(BaseModel):
    """A message a memory came from: `message_id` is the client's id, else `seq:<n>`."""

    session_id: str
    message_id: str
    seq: int


class FieldError(BaseModel):
    """One field a request got wrong."""

    loc: list[str | int] = Field(
        description="where: `body`, `query` or `path`, then the path to the field",
        examples=[["body", "messages", 0, "content"]],
    )
    field: str = Field(description="the field, dotted", examples=["messages.0.content"])
    msg: str = Field(examples=["String should have at least 1 character"])
    type: str | None = Field(default=None, examples=["string_too_short"])


class Problem(BaseModel):
    """RFC 9457 problem details, with a stable `code` and the request id.

    `code` is a plain string rather than an enum so that a code added later does not break
    a client generated today; each route's responses list the codes it may answer.
    """

    type: str = Field(
        description="`urn:strata:problem:<code>`",
        examples=[f"urn:strata:problem:{InvalidInput.code}"],
    )
    title: str = Field(examples=["Invalid request"])
    status: int = Field(examples=[422])
    detail: str = Field(examples=["messages.0.content: String should have at least 1 character"])
    code: str = Field(examples=[InvalidInput.code])
    request_id: str = Field(
        description="also the `X-Request-ID` header; the server's log has it",
        examples=["9f1c2e4b7a8d4e0f9b6a3c5d2e1f0a7b"],
    )
    errors: list[FieldError] | None = Field(
        default=None, description="each field at fault (422, and 400 for JSON syntax)"
    )
