"""What deleting a session does to the memories derived from it, decided without I/O.

A memory sourced only from the erased session goes, with its audit trail (which quotes the
session's content); one also sourced from other sessions stays, losing this session's
sources, in an audited update; one the caller wrote and filed under the session, derived
from none of its messages, stays and is no longer filed there. Soft-deleted memories of
the session are erased too: their history quotes it.

Summaries go by citation: every daily whose sources quote one of the session's messages,
every weekly citing one of those dailies, and the essence citing one of those weeklies
(`plan_summaries`); their periods are summarised again after the delete, without it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from app.core.audit import AuditEvent


class Derived(Protocol):
    """A memory as `plan_detach` reads it (a row, or any object with these fields)."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def tenant_id(self) -> str: ...
    @property
    def user_id(self) -> str: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def sources(self) -> list[dict[str, Any]]: ...
    @property
    def deleted_at(self) -> datetime | None: ...


@dataclass(frozen=True, slots=True)
class Shrunk:
    """A memory that keeps its other sessions' sources; filed under the first of them when
    it was filed under the erased session."""

    id: uuid.UUID
    sources: list[dict[str, Any]]
    session_id: str | None


@dataclass(frozen=True, slots=True)
class DetachPlan:
    erase: list[uuid.UUID]
    shrink: list[Shrunk]
    unfile: list[uuid.UUID]
    events: list[AuditEvent]


def plan_detach(memories: Iterable[Derived], session_id: str, now: datetime) -> DetachPlan:
    """The plan for the memories filed under `session_id` or naming it in their sources."""
    erase: list[uuid.UUID] = []
    shrink: list[Shrunk] = []
    unfile: list[uuid.UUID] = []
    events: list[AuditEvent] = []
    for memory in memories:
        live = memory.deleted_at is None
        if not memory.sources and live:
            unfile.append(memory.id)
            continue
        remaining = [s for s in memory.sources if s.get("session_id") != session_id]
        if not remaining or not live:
            erase.append(memory.id)
            continue
        filed = memory.session_id
        if filed == session_id:
            filed = remaining[0]["session_id"]
        shrink.append(Shrunk(memory.id, remaining, filed))
        events.append(
            AuditEvent(
                memory.tenant_id,
                memory.user_id,
                memory.id,
                "updated",
                old={"sources": memory.sources},
                new={"sources": remaining},
                reason=f"session {session_id} deleted",
                at=now,
            )
        )
    return DetachPlan(erase, shrink, unfile, events)


class Summarised(Protocol):
    """A summary as `plan_summaries` reads it (a row, or any object with these fields)."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def level(self) -> str: ...
    @property
    def sources(self) -> list[Any]: ...


S = TypeVar("S", bound=Summarised)


def plan_summaries(summaries: Iterable[S], session_id: str) -> list[S]:
    """The summaries to delete with `session_id`, in their given order: the dailies citing
    one of its messages, the weeklies citing one of those dailies, the essence citing one
    of those weeklies. A summary citing only others stays."""
    rows = list(summaries)
    doomed: set[str] = set()
    for level, cites in (("daily", None), ("weekly", "daily"), ("essence", "weekly")):
        below = {str(s.id) for s in rows if s.level == cites and str(s.id) in doomed}
        for s in rows:
            if s.level != level:
                continue
            if cites is None:
                hit = any(_get(src, "session_id") == session_id for src in s.sources)
            else:
                hit = any(_get(src, "id") in below for src in s.sources)
            if hit:
                doomed.add(str(s.id))
    return [s for s in rows if str(s.id) in doomed]


def _get(source: Any, key: str) -> Any:
    return source.get(key) if isinstance(source, dict) else None
