"""Queries on users and sessions, including the worker's lease on a session's backlog.

A session is keyed by (tenant, user, session id) (docs/security.md, "Sessions are the
user's"): two users may use one session id, each with a session of their own."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.stores import user_keys
from app.stores.models import Session, User, incarnation
from app.stores.one_hop import Prepared


def _insert(session: AsyncSession, table: Any) -> Any:
    """A dialect INSERT, so that ON CONFLICT clauses work on PostgreSQL and SQLite alike."""
    dialect = session.bind.dialect.name if session.bind is not None else "postgresql"
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)


async def ensure_user(tx: AsyncSession, tenant_id: str, user_id: str, now: datetime) -> None:
    stmt = _insert(tx, User).values(
        tenant_id=tenant_id, id=user_id, profile={}, max_access_count=0, created_at=now
    )
    await tx.execute(stmt.on_conflict_do_nothing(index_elements=["tenant_id", "id"]))
    await user_keys.create(tx, tenant_id, user_id, now)  # before any point of theirs


# Every session route reads the row first: built once.
_GET = sa.select(Session).where(
    Session.tenant_id == sa.bindparam("p_tenant"),
    Session.user_id == sa.bindparam("p_user"),
    Session.id == sa.bindparam("p_session"),
)
_GET_FOR_UPDATE = _GET.with_for_update()


async def get(
    tx: AsyncSession, tenant_id: str, user_id: str, session_id: str, *, for_update: bool = False
) -> Session | None:
    """The user's session of this id (another user's of the same id is not it)."""
    stmt = _GET_FOR_UPDATE if for_update else _GET
    params = {"p_tenant": tenant_id, "p_user": user_id, "p_session": session_id}
    result = await tx.execute(stmt, params)
    row: Session | None = result.scalar_one_or_none()
    return row


async def create_or_lock(
    tx: AsyncSession,
    *,
    tenant_id: str,
    session_id: str,
    user_id: str,
    system_prompt: str | None,
    metadata: dict[str, Any],
    now: datetime,
) -> tuple[Session, bool]:
    """The session row, locked for this transaction, created if missing: (row, created).

    An existing session (every message after a session's first) is one SELECT .. FOR
    UPDATE. A missing one: INSERT .. ON CONFLICT DO NOTHING, then SELECT .. FOR UPDATE, so
    two first writes to a new session race on the insert, not on a lock of a row that does
    not exist yet.
    """
    row = await get(tx, tenant_id, user_id, session_id, for_update=True)
    if row is not None:
        return row, False
    for _ in range(3):
        stmt = (
            _insert(tx, Session)
            .values(
                tenant_id=tenant_id,
                id=session_id,
                user_id=user_id,
                system_prompt=system_prompt,
                metadata_=metadata,
                last_seq=0,
                indexed_seq=0,
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_nothing(index_elements=["tenant_id", "user_id", "id"])
            .returning(Session.id)
        )
        created = (await tx.execute(stmt)).first() is not None
        row = await get(tx, tenant_id, user_id, session_id, for_update=True)
        if row is not None:
            return row, created
        # It was being deleted: our insert conflicted, the delete committed, try again.
    raise RuntimeError(f"session {session_id!r} kept vanishing while being created")


class SessionChanges(TypedDict, total=False):
    system_prompt: str | None
    metadata_: dict[str, Any]


async def update(
    tx: AsyncSession,
    tenant_id: str,
    user_id: str,
    session_id: str,
    changes: SessionChanges,
    now: datetime,
) -> Session:
    """Set these fields (and `updated_at`); returns the row as it now is."""
    stmt = (
        sa.update(Session)
        .where(Session.tenant_id == tenant_id, Session.user_id == user_id, Session.id == session_id)
        .values(**changes, updated_at=now)
        .returning(Session)
        .execution_options(populate_existing=True)
    )
    return (await tx.execute(stmt)).scalar_one()


_SESSIONS = cast(sa.Table, Session.__table__)

# Built once, with its values bound per call: building a statement costs more CPU than
# SQLite takes to run it, and every message after a session's first runs this one.
_RESERVE = (
    sa.update(_SESSIONS)
    .where(
        _SESSIONS.c.tenant_id == sa.bindparam("p_tenant"),
        _SESSIONS.c.id == sa.bindparam("p_session"),
        _SESSIONS.c.user_id == sa.bindparam("p_user"),
    )
    .values(last_seq=_SESSIONS.c.last_seq + sa.bindparam("p_n"), updated_at=sa.bindparam("p_now"))
    .returning(_SESSIONS.c.last_seq)
)


async def reserve_seqs(
    tx: AsyncSession, tenant_id: str, user_id: str, session_id: str, n: int, now: datetime
) -> int | None:
    """Lock a known session of this user and move its `last_seq` on by `n`, in one statement:
    the `last_seq` before the move, or None if the user has no such session (the caller
    then takes `create_or_lock`). Every message after a session's first lands here, so this
    is the one-message ingest's whole session work: the lock, the ownership check and the
    advance that `get(for_update=True)` and `advance_last_seq` did in two round trips.
    """
    params = {"p_tenant": tenant_id, "p_session": session_id, "p_user": user_id}
    result = await tx.execute(_RESERVE, {**params, "p_n": n, "p_now": now})
    moved: int | None = result.scalar_one_or_none()
    return None if moved is None else moved - n


_RESERVE_ONE_HOP = Prepared(_RESERVE)


def reserve_seqs_in(
    conn: sqlite3.Connection, tenant_id: str, user_id: str, session_id: str, n: int, now: datetime
) -> int | None:
    """`reserve_seqs` on the one-hop writer's connection (`Database.write_in_one`)."""
    values = {"p_tenant": tenant_id, "p_session": session_id, "p_user": user_id, "p_n": n}
    rows = _RESERVE_ONE_HOP.run(conn, {**values, "p_now": now}).fetchall()
    return int(rows[0][0]) - n if rows else None


async def advance_last_seq(
    tx: AsyncSession, tenant_id: str, user_id: str, session_id: str, last_seq: int, now: datetime
) -> None:
    await tx.execute(
        sa.update(Session)
        .where(Session.tenant_id == tenant_id, Session.user_id == user_id, Session.id == session_id)
        .values(last_seq=last_seq, updated_at=now)
    )


async def delete(tx: AsyncSession, tenant_id: str, user_id: str, session_id: str) -> None:
    await tx.execute(
        sa.delete(Session).where(
            Session.tenant_id == tenant_id, Session.user_id == user_id, Session.id == session_id
        )
    )


@dataclass(frozen=True, slots=True)
class Claim:
    tenant_id: str
    session_id: str
    user_id: str
    indexed_seq: int
    last_seq: int
    incarnation: str  # `Session.incarnation`: part of its memories' ids
    promote_failures: int = 0  # failed passes in a row, for the next backoff


@dataclass(frozen=True, slots=True)
class Backlog:
    claims: list[Claim]
    # Pending sessions this claim left (one per user, at most `limit`): more work waits.
    more: bool


# The worker's pass runs these every time, most often for one new message: built once.
_PENDING = (
    sa.select(Session.tenant_id, Session.id, Session.user_id)
    .outerjoin(User, sa.and_(User.tenant_id == Session.tenant_id, User.id == Session.user_id))
    .where(
        Session.last_seq > Session.indexed_seq,
        sa.or_(
            Session.promote_retry_at.is_(None), Session.promote_retry_at <= sa.bindparam("p_now")
        ),
        sa.or_(
            Session.lease_expires_at.is_(None),
            Session.lease_expires_at < sa.bindparam("p_now"),
            Session.lease_owner == sa.bindparam("p_owner"),
        ),
    )
    .order_by(
        User.promoted_at.asc().nulls_first(),
        Session.promoted_at.asc().nulls_first(),
        Session.updated_at,
    )
    .limit(sa.bindparam("p_limit"))
    .with_for_update(of=Session, skip_locked=True)
)
_LEASE = (
    sa.update(_SESSIONS)
    .where(
        _SESSIONS.c.tenant_id == sa.bindparam("p_tenant"),
        _SESSIONS.c.user_id == sa.bindparam("p_user"),
        _SESSIONS.c.id == sa.bindparam("p_session"),
    )
    .values(
        lease_owner=sa.bindparam("p_owner"),
        lease_expires_at=sa.bindparam("p_until"),
        promoted_at=sa.bindparam("p_now"),
    )
    .returning(
        _SESSIONS.c.indexed_seq,
        _SESSIONS.c.last_seq,
        _SESSIONS.c.created_at,
        _SESSIONS.c.ids_by_user,
        _SESSIONS.c.promote_failures,
    )
)
_USERS = cast(sa.Table, User.__table__)
_USER_SERVED = (
    sa.update(_USERS)
    .where(_USERS.c.tenant_id == sa.bindparam("p_tenant"), _USERS.c.id == sa.bindparam("p_user"))
    .values(promoted_at=sa.bindparam("p_now"))
)


async def claim_backlog(
    tx: AsyncSession, *, owner: str, now: datetime, lease_until: datetime, limit: int
) -> Backlog:
    """Lease up to `limit` sessions whose log is ahead of their index, one per user, the
    least recently served first: users by `users.promoted_at`, then their sessions by
    `sessions.promoted_at` (never served first). Claiming stamps both, so a user with a
    huge backlog goes to the back after each slice, behind everyone else (round robin).

    SKIP LOCKED lets N workers share the backlog without waiting on one another; an expired
    lease (a crashed worker) is taken over. SQLite ignores the locking clause, and needs none:
    the embedded mode has one worker and serialised writes. A session whose promotion
    failed waits out its backoff (`promote_retry_at`), so it cannot hold up the others.
    """
    chosen: list[tuple[str, str, str]] = []
    users: set[tuple[str, str]] = set()
    # Several candidates per slot: one user's many sessions must not fill the pass.
    params = {"p_now": now, "p_owner": owner, "p_limit": limit * 4}
    pending = (await tx.execute(_PENDING, params)).all()
    for tenant_id, session_id, user_id in pending:
        if (tenant_id, user_id) not in users and len(chosen) < limit:
            users.add((tenant_id, user_id))
            chosen.append((tenant_id, session_id, user_id))
    claims: list[Claim] = []
    for tenant_id, session_id, user_id in chosen:
        lease = {"p_owner": owner, "p_until": lease_until, "p_now": now}
        key = {"p_tenant": tenant_id, "p_user": user_id, "p_session": session_id}
        result = await tx.execute(_LEASE, {**key, **lease})
        indexed_seq, last_seq, created_at, by_user, failures = result.one()
        await tx.execute(_USER_SERVED, {"p_tenant": tenant_id, "p_user": user_id, "p_now": now})
        claims.append(
            Claim(
                tenant_id,
                session_id,
                user_id,
                indexed_seq,
                last_seq,
                incarnation(created_at, user_id, by_user),
                failures,
            )
        )
    # A user's other sessions, or more users than one claim takes: the caller goes on.
    return Backlog(claims, more=len(pending) > len(chosen))


_ADVANCE = (
    sa.update(_SESSIONS)
    .where(
        _SESSIONS.c.tenant_id == sa.bindparam("p_tenant"),
        _SESSIONS.c.user_id == sa.bindparam("p_user"),
        _SESSIONS.c.id == sa.bindparam("p_session"),
        _SESSIONS.c.lease_owner == sa.bindparam("p_owner"),
        _SESSIONS.c.indexed_seq == sa.bindparam("p_from"),
    )
    .values(indexed_seq=sa.bindparam("p_to"), lease_expires_at=sa.bindparam("p_until"))
)
# The same, giving the lease back as `release_lease` does after a pass that went well.
_ADVANCE_AND_RELEASE = _ADVANCE.values(
    lease_owner=None,
    lease_expires_at=None,
    promote_failures=0,
    promote_retry_at=None,
)


async def advance_watermark(
    tx: AsyncSession,
    *,
    tenant_id: str,
    user_id: str,
    session_id: str,
    owner: str,
    from_seq: int,
    to_seq: int,
    lease_until: datetime,
    release: bool = False,
) -> bool:
    """Move `indexed_seq` forward if we still hold the lease and nobody moved it meanwhile;
    with `release`, also give the lease back as `release_lease` does after a pass that
    went well (one write transaction a pass instead of two, which an ingest waits behind
    on SQLite), else hold it until `lease_until`.

    Returns False when the lease was lost: the caller's transaction must then roll back,
    so that rows written under a lost lease are never committed twice.
    """
    params: dict[str, Any] = {
        "p_tenant": tenant_id,
        "p_user": user_id,
        "p_session": session_id,
        "p_owner": owner,
        "p_from": from_seq,
        "p_to": to_seq,
    }
    if release:
        result = await tx.execute(_ADVANCE_AND_RELEASE, params)
    else:
        result = await tx.execute(_ADVANCE, {**params, "p_until": lease_until})
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def release_lease(
    tx: AsyncSession,
    *,
    tenant_id: str,
    user_id: str,
    session_id: str,
    owner: str,
    retry_at: datetime | None = None,
) -> None:
    """Give the session back after a pass. With `retry_at` the pass failed: one more
    failure is counted and the session waits until then; without, the count is reset."""
    backoff = (
        {"promote_failures": Session.promote_failures + 1, "promote_retry_at": retry_at}
        if retry_at is not None
        else {"promote_failures": 0, "promote_retry_at": None}
    )
    await tx.execute(
        sa.update(Session)
        .where(
            Session.tenant_id == tenant_id,
            Session.user_id == user_id,
            Session.id == session_id,
            Session.lease_owner == owner,
        )
        .values(lease_owner=None, lease_expires_at=None, **backoff)
    )


async def indexed_seq(
    tx: AsyncSession, tenant_id: str, user_id: str, session_id: str
) -> int | None:
    result = await tx.execute(
        sa.select(Session.indexed_seq).where(
            Session.tenant_id == tenant_id, Session.user_id == user_id, Session.id == session_id
        )
    )
    return result.scalar_one_or_none()


async def backlog_exists(tx: AsyncSession) -> bool:
    result = await tx.execute(
        sa.select(sa.literal(1)).where(Session.last_seq > Session.indexed_seq).limit(1)
    )
    return result.first() is not None


@dataclass(frozen=True, slots=True)
class IndexLag:
    messages: int  # in the log, not yet indexed
    sessions: int  # sessions with such messages


async def index_lag(tx: AsyncSession) -> IndexLag:
    """Across every tenant: an operator's figure (`/readyz`), never shown to a tenant."""
    result = await tx.execute(
        sa.select(
            sa.func.coalesce(sa.func.sum(Session.last_seq - Session.indexed_seq), 0),
            sa.func.count(),
        ).where(Session.last_seq > Session.indexed_seq)
    )
    messages, sessions = result.one()
    return IndexLag(int(messages), int(sessions))
