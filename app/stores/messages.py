"""Queries on the message log: the durable record of every accepted message. A session's
messages are named by (tenant, user, session id), as the session is."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.stores.models import Message, Session
from app.stores.one_hop import Prepared

# SQLite's default limit is 32,766 bound parameters; 10 columns a row keeps inserts under it.
_INSERT_CHUNK = 500
_SPANS = 200  # seq spans OR-ed in one query


async def existing_client_ids(
    tx: AsyncSession, tenant_id: str, user_id: str, session_id: str, client_ids: Sequence[str]
) -> set[str]:
    if not client_ids:
        return set()
    found: set[str] = set()
    for start in range(0, len(client_ids), _INSERT_CHUNK):
        chunk = client_ids[start : start + _INSERT_CHUNK]
        params = {"p_tenant": tenant_id, "p_user": user_id, "p_session": session_id, "p_ids": chunk}
        result = await tx.execute(_EXISTING, params)
        found.update(cid for cid in result.scalars() if cid is not None)
    return found


# Built once: building a statement costs more CPU than SQLite running it.
_EXISTING = sa.select(Message.client_id).where(
    Message.tenant_id == sa.bindparam("p_tenant"),
    Message.user_id == sa.bindparam("p_user"),
    Message.session_id == sa.bindparam("p_session"),
    Message.client_id.in_(sa.bindparam("p_ids", expanding=True)),
)
_MESSAGES = cast(sa.Table, Message.__table__)
_INSERT = _MESSAGES.insert()
# One message with its client id unless that id is stored already: the unique (tenant,
# user, session, client id) decides, in the statement that writes it (`insert_new`).
_INSERT_NEW = {
    name: make(_MESSAGES).on_conflict_do_nothing(
        index_elements=["tenant_id", "user_id", "session_id", "client_id"]
    )
    for name, make in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
}


async def insert_many(tx: AsyncSession, rows: list[dict[str, Any]]) -> None:
    """Rows keyed by the model's attribute names (`metadata_`). A Core insert: the ORM's
    bulk form spends longer sorting the keys of a one-message batch than SQLite its write."""
    params = [{("metadata" if k == "metadata_" else k): v for k, v in r.items()} for r in rows]
    for start in range(0, len(params), _INSERT_CHUNK):
        await tx.execute(_INSERT, params[start : start + _INSERT_CHUNK])


_INSERT_NEW_ONE_HOP = Prepared(
    _INSERT_NEW["sqlite"], column_keys=[c.name for c in _MESSAGES.columns]
)


def insert_new_in(conn: sqlite3.Connection, row: dict[str, Any]) -> bool:
    """`insert_new` on the one-hop writer's connection (`Database.write_in_one`)."""
    params = {("metadata" if k == "metadata_" else k): v for k, v in row.items()}
    return _INSERT_NEW_ONE_HOP.run(conn, params).rowcount == 1


async def insert_new(tx: AsyncSession, row: dict[str, Any]) -> bool:
    """Insert one row that has a client id; False (nothing written) when the session holds
    that id already. The usual ingest, one message that may be a retry, takes this one
    statement where `existing_client_ids` and `insert_many` take two."""
    dialect = tx.bind.dialect.name if tx.bind is not None else "postgresql"
    params = {("metadata" if k == "metadata_" else k): v for k, v in row.items()}
    result = await tx.execute(_INSERT_NEW[dialect], params)
    return cast(sa.CursorResult[Any], result).rowcount == 1


async def page(
    tx: AsyncSession,
    tenant_id: str,
    user_id: str,
    session_id: str,
    *,
    before_seq: int | None = None,
    until: datetime | None = None,
    limit: int,
) -> list[Message]:
    """The `limit` newest messages before `before_seq` and created at or before `until`
    (a replay), returned oldest first."""
    stmt = sa.select(Message).where(
        Message.tenant_id == tenant_id,
        Message.user_id == user_id,
        Message.session_id == session_id,
    )
    if before_seq is not None:
        stmt = stmt.where(Message.seq < before_seq)
    if until is not None:
        stmt = stmt.where(Message.created_at <= until)
    rows = (await tx.execute(stmt.order_by(Message.seq.desc()).limit(limit))).scalars().all()
    return list(reversed(rows))


async def seq_range(
    tx: AsyncSession,
    tenant_id: str,
    user_id: str,
    session_id: str,
    *,
    after_seq: int,
    upto_seq: int,
) -> list[Message]:
    stmt = (
        sa.select(Message)
        .where(
            Message.tenant_id == tenant_id,
            Message.user_id == user_id,
            Message.session_id == session_id,
            Message.seq > after_seq,
            Message.seq <= upto_seq,
        )
        .order_by(Message.seq)
    )
    return list((await tx.execute(stmt)).scalars().all())


async def windows(
    tx: AsyncSession,
    tenant_id: str,
    user_id: str,
    session_id: str,
    spans: Sequence[tuple[int, int]],
) -> list[Message]:
    """The messages of a session whose seq lies in any of the spans `(after, upto]`."""
    if not spans:
        return []
    found: dict[int, Message] = {}
    for start in range(0, len(spans), _SPANS):
        part = spans[start : start + _SPANS]
        stmt = sa.select(Message).where(
            Message.tenant_id == tenant_id,
            Message.user_id == user_id,
            Message.session_id == session_id,
            sa.or_(*(sa.and_(Message.seq > a, Message.seq <= b) for a, b in part)),
        )
        found.update((m.seq, m) for m in (await tx.execute(stmt)).scalars())
    return [found[seq] for seq in sorted(found)]


async def delete_session(tx: AsyncSession, tenant_id: str, user_id: str, session_id: str) -> int:
    result = await tx.execute(
        sa.delete(Message).where(
            Message.tenant_id == tenant_id,
            Message.user_id == user_id,
            Message.session_id == session_id,
        )
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


async def last_of_role(
    tx: AsyncSession,
    tenant_id: str,
    user_id: str,
    session_id: str,
    role: str,
    *,
    until: datetime | None,
) -> Message | None:
    stmt = sa.select(Message).where(
        Message.tenant_id == tenant_id,
        Message.user_id == user_id,
        Message.session_id == session_id,
        Message.role == role,
    )
    if until is not None:
        stmt = stmt.where(Message.created_at <= until)
    stmt = stmt.order_by(Message.seq.desc()).limit(1)
    return (await tx.execute(stmt)).scalar_one_or_none()


@dataclass(frozen=True, slots=True)
class PromotedTurn:
    message: Message
    incarnation: str  # its session's (the ids of what was extracted from it are named by it)


async def promoted_user_turns(
    tx: AsyncSession,
    tenant_id: str | None,
    user_id: str | None,
    *,
    after: tuple[str, str, str, int] | None,
    limit: int,
) -> list[PromotedTurn]:
    """User turns already promoted (seq at most their session's `indexed_seq`), of a tenant
    (None: every tenant) and a user (None: every user), in key order after `after`
    ((tenant, user, session, seq), a keyset): the `graph` maintenance task's pages."""
    stmt = (
        sa.select(Message, Session)
        .join(
            Session,
            sa.and_(
                Session.tenant_id == Message.tenant_id,
                Session.user_id == Message.user_id,
                Session.id == Message.session_id,
            ),
        )
        .where(Message.role == "user", Message.seq <= Session.indexed_seq)
    )
    if tenant_id is not None:
        stmt = stmt.where(Message.tenant_id == tenant_id)
    if user_id is not None:
        stmt = stmt.where(Message.user_id == user_id)
    key = (Message.tenant_id, Message.user_id, Message.session_id, Message.seq)
    if after is not None:
        stmt = stmt.where(sa.tuple_(*key) > sa.tuple_(*after))
    rows = (await tx.execute(stmt.order_by(*key).limit(limit))).all()
    return [PromotedTurn(m, s.incarnation) for m, s in rows]
