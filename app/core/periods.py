"""The periods summaries cover (pure): a user's local day and ISO week (Monday first) as UTC
instants, closure, and the deterministic ids and input hashes that make summarising
idempotent.

A daily period is the user's local calendar day, `[local 00:00, next local 00:00)`: 23 or
25 hours across a daylight-saving change. A weekly one is the 7 local days from Monday.
The essence is not a calendar period: it covers every weekly, from the first week's start
to the last week's end.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

log = logging.getLogger("strata.summaries")

Level = Literal["daily", "weekly", "essence"]
LEVELS: tuple[Level, ...] = ("daily", "weekly", "essence")
PARENT: dict[Level, Level | None] = {"daily": "weekly", "weekly": "essence", "essence": None}

# The namespace of summary ids: uuid5(namespace, "tenant/user/level/period_start").
SUMMARY_NAMESPACE = uuid.UUID("6f1d3c56-9a51-4c1e-8a57-3b0f6c1d2e90")


def zone(name: object) -> ZoneInfo:
    """The IANA zone `name`; anything else (missing, misspelt, not a string) is UTC, with
    a warning: a bad profile value must not stop the user's summaries."""
    if isinstance(name, str) and name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            log.warning("unknown timezone %r in a profile; using UTC", name)
    elif name is not None:
        log.warning("timezone %r in a profile is not a name; using UTC", name)
    return ZoneInfo("UTC")


@dataclass(frozen=True, slots=True)
class Period:
    """A level's period: its first local day and its UTC bounds `[start, end)`."""

    level: Level
    first_day: date
    start: datetime
    end: datetime

    def closed(self, now: datetime) -> bool:
        return self.end <= now


def local_midnight(day: date, tz: ZoneInfo) -> datetime:
    return datetime.combine(day, time(), tzinfo=tz).astimezone(UTC)


def local_day(instant: datetime, tz: ZoneInfo) -> date:
    return instant.astimezone(tz).date()


def week_start(day: date) -> date:
    return day - timedelta(days=day.weekday())


def period(level: Level, day: date, tz: ZoneInfo) -> Period:
    """The daily or weekly period that local `day` falls in."""
    if level == "daily":
        first, last = day, day + timedelta(days=1)
    elif level == "weekly":
        first = week_start(day)
        last = first + timedelta(days=7)
    else:
        raise ValueError("the essence has no calendar period")
    return Period(level, first, local_midnight(first, tz), local_midnight(last, tz))


def latest_closed(level: Level, now: datetime, tz: ZoneInfo) -> Period:
    """The newest daily or weekly period that ended at or before `now`."""
    today = local_day(now, tz)
    current = period(level, today, tz)
    return period(level, current.first_day - timedelta(days=1), tz)


def days_between(first: datetime, last: datetime, tz: ZoneInfo) -> list[date]:
    """Every local day from the one `first` falls in to the one `last` falls in."""
    start, end = local_day(first, tz), local_day(last, tz)
    return [start + timedelta(days=i) for i in range((end - start).days + 1)]


def summary_id(tenant_id: str, user_id: str, level: Level, period_start: datetime) -> uuid.UUID:
    key = f"{tenant_id}/{user_id}/{level}/{period_start.astimezone(UTC).isoformat()}"
    return uuid.uuid5(SUMMARY_NAMESPACE, key)


def source_hash(level: Level, parts: Iterable[str]) -> str:
    """A hash of a summary's inputs: message refs for a daily (messages are never edited,
    so the refs pin their content), `id:source_hash` of the children above that."""
    h = hashlib.sha256(level.encode())
    for part in parts:
        h.update(b"\x00")
        h.update(part.encode())
    return h.hexdigest()


def message_part(session_id: str, seq: int) -> str:
    return f"{session_id}#{seq}"


def child_part(child_id: uuid.UUID, child_hash: str) -> str:
    return f"{child_id}:{child_hash}"


def job_key(user_id: str, level: Level, first_day: date | None) -> str:
    """One job per (user, level, period): `"<user>:<level>@<first local day>"`; the
    essence, one per user, is `"<user>:essence"`."""
    return f"{user_id}:{level}" if first_day is None else f"{user_id}:{level}@{first_day}"
