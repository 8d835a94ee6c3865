"""One cursor for every list (docs/reliability.md, "Limits"): `{items, next_cursor}`, and the
`next_cursor` passed back as `cursor`.

A cursor is opaque to callers: base64url (unpadded) of a JSON list, the key of the last item
a page showed. No cursor, or an empty one, is the first page; anything else given as
`cursor` (not base64, not a JSON list, a list of the wrong shape, a value out of range) is
a 422 `invalid_cursor`, on every list alike. Each list reads its cursor with one of the
readers below, which answer None for the first page.
"""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson

from app.errors import InvalidCursor


def encode_cursor(*parts: str | int) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(parts)).decode().rstrip("=")


def decode_cursor(cursor: str) -> list[Any]:
    """The cursor's parts; `InvalidCursor` unless it is one `encode_cursor` could make."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = orjson.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise InvalidCursor() from exc
    if not isinstance(value, list):
        raise InvalidCursor()
    return value


def time_and_id(cursor: str | None) -> tuple[datetime, uuid.UUID] | None:
    """A cursor of (an aware time, a UUID), the time in UTC."""
    if not cursor:
        return None
    parts = decode_cursor(cursor)
    try:
        if len(parts) != 2 or not all(isinstance(p, str) for p in parts):
            raise ValueError(parts)
        when, item_id = datetime.fromisoformat(parts[0]), uuid.UUID(parts[1])
        if when.tzinfo is None:
            raise ValueError(parts)
        return when.astimezone(UTC), item_id
    except (ValueError, OverflowError) as exc:
        raise InvalidCursor() from exc


def one_id(cursor: str | None) -> uuid.UUID | None:
    if not cursor:
        return None
    parts = decode_cursor(cursor)
    try:
        if len(parts) != 1 or not isinstance(parts[0], str):
            raise ValueError(parts)
        return uuid.UUID(parts[0])
    except ValueError as exc:
        raise InvalidCursor() from exc


def rank_length_name(cursor: str | None) -> tuple[int, int, str] | None:
    """A cursor of (0 or 1, a length, a name): graph entities' order."""
    if not cursor:
        return None
    parts = decode_cursor(cursor)
    if (
        len(parts) != 3
        or parts[0] not in (0, 1)
        or type(parts[0]) is not int
        or type(parts[1]) is not int
        or not 0 <= parts[1] <= 256
        or not isinstance(parts[2], str)
        or not parts[2]
        or "\x00" in parts[2]  # PostgreSQL's text cannot hold it (orjson refuses surrogates)
        or len(parts[2]) != parts[1]
    ):
        raise InvalidCursor()
    return parts[0], parts[1], parts[2]


def one_int(cursor: str | None, *, low: int = 0, high: int = 2**63 - 1) -> int | None:
    """A cursor of one integer in [low, high] (a seq, an event id: 64-bit columns)."""
    if not cursor:
        return None
    parts = decode_cursor(cursor)
    if len(parts) != 1 or type(parts[0]) is not int or not low <= parts[0] <= high:
        raise InvalidCursor()
    value: int = parts[0]
    return value


def one_str(cursor: str | None) -> str | None:
    """A cursor of one non-empty string (an id: users, sessions)."""
    if not cursor:
        return None
    parts = decode_cursor(cursor)
    if len(parts) != 1 or not isinstance(parts[0], str) or not parts[0] or "\x00" in parts[0]:
        raise InvalidCursor()
    value: str = parts[0]
    return value
