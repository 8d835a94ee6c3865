"""Queries on summaries, and the reads of the message log and profiles that summarising
needs (docs/architecture.md, "Summaries")."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.stores.models import Message, Summary, User
from app.stores.sessions import _insert


class SummaryValues(TypedDict):
    id: uuid.UUID
    tenant_id: str
    user_id: str
    level: str
    period_start: datetime
    period_end: datetime
    timezone: str
    content: str
    sources: list[Any]
    source_hash: str
    tokens: int
    method: str
    llm_usage: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime


async def profile(tx: AsyncSession, tenant_id: str, user_id: str) -> dict[str, Any]:
    """The user's profile JSON; {} for a user never seen."""
    result = await tx.execute(
        sa.select(User.profile).where(User.tenant_id == tenant_id, User.id == user_id)
    )
    value = result.scalar_one_or_none()
    return value if isinstance(value, dict) else {}


async def messages_between(
    tx: AsyncSession, tenant_id: str, user_id: str, start: datetime, end: datetime
) -> list[Message]:
    """The user's messages, across sessions, created in `[start, end)`, in time order."""
    stmt = (
        sa.select(Message)
        .where(
            Message.tenant_id == tenant_id,
            Message.user_id == user_id,
            Message.created_at >= start,
            Message.created_at < end,
        )
        .order_by(Message.created_at, Message.session_id, Message.seq)
    )
    return list((await tx.execute(stmt)).scalars().all())


@dataclass(frozen=True, slots=True)
class MessageRef:
    session_id: str
    seq: int
    created_at: datetime


async def message_refs_between(
    tx: AsyncSession, tenant_id: str, user_id: str, start: datetime, end: datetime
) -> list[MessageRef]:
    """What `messages_between` finds, without the content: enough to hash a day's inputs."""
    stmt = (
        sa.select(Message.session_id, Message.seq, Message.created_at)
        .where(
            Message.tenant_id == tenant_id,
            Message.user_id == user_id,
            Message.created_at >= start,
            Message.created_at < end,
        )
        .order_by(Message.created_at, Message.session_id, Message.seq)
    )
    return [MessageRef(s, q, c) for s, q, c in (await tx.execute(stmt)).all()]


@dataclass(frozen=True, slots=True)
class Touched:
    """A user with messages received lately, and the span of their event times."""

    tenant_id: str
    user_id: str
    first_created: datetime
    last_created: datetime


async def users_received_between(
    tx: AsyncSession, since: datetime, until: datetime
) -> list[Touched]:
    stmt = (
        sa.select(
            Message.tenant_id,
            Message.user_id,
            sa.func.min(Message.created_at),
            sa.func.max(Message.created_at),
        )
        .where(Message.received_at >= since, Message.received_at < until)
        .group_by(Message.tenant_id, Message.user_id)
        .order_by(Message.tenant_id, Message.user_id)
    )
    rows = (await tx.execute(stmt)).all()
    # min/max lose the column's type decorator on SQLite: read them back as UTC.
    return [Touched(t, u, _aware(a), _aware(b)) for t, u, a, b in rows]


def _aware(value: Any) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


async def get(
    tx: AsyncSession, tenant_id: str, user_id: str, summary_id: uuid.UUID
) -> Summary | None:
    stmt = sa.select(Summary).where(
        Summary.tenant_id == tenant_id, Summary.user_id == user_id, Summary.id == summary_id
    )
    return (await tx.execute(stmt)).scalar_one_or_none()


async def of_level(
    tx: AsyncSession,
    tenant_id: str,
    user_id: str,
    level: str,
    *,
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[Summary]:
    """The user's summaries of `level` whose period starts in `[start, end)`, oldest first."""
    stmt = sa.select(Summary).where(
        Summary.tenant_id == tenant_id, Summary.user_id == user_id, Summary.level == level
    )
    if start is not None:
        stmt = stmt.where(Summary.period_start >= start)
    if end is not None:
        stmt = stmt.where(Summary.period_start < end)
    return list((await tx.execute(stmt.order_by(Summary.period_start))).scalars().all())


async def recent_of_level(tx: AsyncSession, level: str, since: datetime) -> list[Summary]:
    """Every user's summaries of `level` whose period started at or after `since`."""
    stmt = (
        sa.select(Summary)
        .where(Summary.level == level, Summary.period_start >= since)
        .order_by(Summary.tenant_id, Summary.user_id, Summary.period_start)
    )
    return list((await tx.execute(stmt)).scalars().all())


async def upsert(tx: AsyncSession, values: SummaryValues) -> Summary:
    """Insert the summary, or overwrite the row of its period (same id), keeping its
    `created_at`."""
    stmt = _insert(tx, Summary).values(**values)
    changed = {
        k: getattr(stmt.excluded, k)
        for k in (
            "period_end",
            "timezone",
            "content",
            "sources",
            "source_hash",
            "tokens",
            "method",
            "llm_usage",
            "updated_at",
        )
    }
    stmt = stmt.on_conflict_do_update(index_elements=["id"], set_=changed).returning(Summary)
    row: Summary = (await tx.execute(stmt.execution_options(populate_existing=True))).scalar_one()
    return row


async def delete_other_essences(
    tx: AsyncSession, tenant_id: str, user_id: str, keep: uuid.UUID
) -> list[uuid.UUID]:
    """Drop the user's essence rows but `keep` (its span began earlier since): their ids."""
    result = await tx.execute(
        sa.delete(Summary)
        .where(
            Summary.tenant_id == tenant_id,
            Summary.user_id == user_id,
            Summary.level == "essence",
            Summary.id != keep,
        )
        .returning(Summary.id)
    )
    return list(result.scalars().all())


async def page(
    tx: AsyncSession,
    tenant_id: str,
    user_id: str,
    *,
    levels: Sequence[str] | None,
    start_from: datetime | None,
    start_to: datetime | None,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
) -> list[Summary]:
    """Newest period first; `after` is the (period_start, id) of the last row of the
    previous page."""
    stmt = sa.select(Summary).where(Summary.tenant_id == tenant_id, Summary.user_id == user_id)
    if levels:
        stmt = stmt.where(Summary.level.in_(list(levels)))
    if start_from is not None:
        stmt = stmt.where(Summary.period_start >= start_from)
    if start_to is not None:
        stmt = stmt.where(Summary.period_start <= start_to)
    if after is not None:
        when, last_id = after
        stmt = stmt.where(
            sa.or_(
                Summary.period_start < when,
                sa.and_(Summary.period_start == when, Summary.id < last_id),
            )
        )
    stmt = stmt.order_by(Summary.period_start.desc(), Summary.id.desc()).limit(limit)
    return list((await tx.execute(stmt)).scalars().all())


# Context reads these on every call: built once.
def _newest_ended(level: str | None, limit: str) -> sa.Select[Summary]:
    return (
        sa.select(Summary)
        .where(
            Summary.tenant_id == sa.bindparam("p_tenant"),
            Summary.user_id == sa.bindparam("p_user"),
            Summary.level == (sa.bindparam("p_level") if level is None else level),
            Summary.period_end <= sa.bindparam("p_ended_by"),
        )
        .order_by(Summary.period_start.desc())
        .limit(sa.bindparam(limit))
    )


_BEFORE = _newest_ended(None, "p_limit")
# The dailies and the essence in one statement (each statement costs more than the few
# rows it reads); each branch keeps its own index range and limit.
_DAILIES_AND_ESSENCE = sa.select(Summary).from_statement(
    sa.union_all(
        sa.select(_newest_ended("daily", "p_dailies").subquery("dailies")),
        sa.select(_newest_ended("essence", "p_one").subquery("essence")),
    )
)


async def before(
    tx: AsyncSession,
    tenant_id: str,
    user_id: str,
    level: str,
    *,
    ended_by: datetime,
    limit: int,
) -> list[Summary]:
    """The user's newest `limit` summaries of `level` whose period ended by `ended_by`,
    newest first (context's older periods)."""
    params = {"p_tenant": tenant_id, "p_user": user_id, "p_level": level}
    result = await tx.execute(_BEFORE, {**params, "p_ended_by": ended_by, "p_limit": limit})
    return list(result.scalars().all())


async def dailies_and_essence(
    tx: AsyncSession, tenant_id: str, user_id: str, *, ended_by: datetime, dailies: int
) -> tuple[list[Summary], Summary | None]:
    """The user's newest `dailies` dailies that ended by `ended_by`, newest first, and
    the essence if it did too."""
    params = {"p_tenant": tenant_id, "p_user": user_id, "p_ended_by": ended_by}
    result = await tx.execute(_DAILIES_AND_ESSENCE, {**params, "p_dailies": dailies, "p_one": 1})
    rows = list(result.scalars().all())
    found = sorted(
        (r for r in rows if r.level == "daily"), key=lambda r: r.period_start, reverse=True
    )
    return found, next((r for r in rows if r.level == "essence"), None)


async def session_span(
    tx: AsyncSession, tenant_id: str, user_id: str, session_id: str
) -> tuple[datetime, datetime] | None:
    """The first and last `created_at` of the session's messages; None when it has none."""
    stmt = sa.select(sa.func.min(Message.created_at), sa.func.max(Message.created_at)).where(
        Message.tenant_id == tenant_id, Message.user_id == user_id, Message.session_id == session_id
    )
    first, last = (await tx.execute(stmt)).one()
    if first is None or last is None:
        return None
    return _aware(first), _aware(last)


async def lock_covering(
    tx: AsyncSession, tenant_id: str, user_id: str, first: datetime, last: datetime
) -> list[Summary]:
    """The user's summaries that may cite a message created in `[first, last]`: the dailies
    and weeklies whose period overlaps it, and the essence; locked, in id order."""
    stmt = (
        sa.select(Summary)
        .where(
            Summary.tenant_id == tenant_id,
            Summary.user_id == user_id,
            sa.or_(
                Summary.level == "essence",
                sa.and_(Summary.period_start <= last, Summary.period_end > first),
            ),
        )
        .order_by(Summary.id)
        .with_for_update()
    )
    return list((await tx.execute(stmt)).scalars().all())


async def delete_ids(
    tx: AsyncSession, tenant_id: str, user_id: str, ids: Sequence[uuid.UUID]
) -> None:
    if ids:
        await tx.execute(
            sa.delete(Summary).where(
                Summary.tenant_id == tenant_id,
                Summary.user_id == user_id,
                Summary.id.in_(list(ids)),
            )
        )
