"""Queries on a user's knowledge graph: entities, bi-temporal relations, and the bounded
recursive walk behind `neighbors` (one recursive CTE, PostgreSQL and SQLite alike)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
import sqlalchemy.orm
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession

from app.stores.models import Entity, Relation
from app.stores.sessions import _insert


@dataclass(frozen=True, slots=True)
class NewEntity:
    name: str
    name_key: str
    entity_type: str | None


async def ensure_entities(
    tx: AsyncSession, tenant_id: str, user_id: str, entities: Sequence[NewEntity], now: datetime
) -> dict[str, Entity]:
    """The user's entities of these names, created where missing; by `name_key`. A type
    given later fills one left unknown."""
    if not entities:
        return {}
    unique: dict[str, NewEntity] = {}
    for e in entities:  # the first spelling names it; the first type given types it
        seen = unique.get(e.name_key)
        if seen is None or (seen.entity_type is None and e.entity_type):
            unique[e.name_key] = NewEntity(seen.name if seen else e.name, e.name_key, e.entity_type)
    stmt = _insert(tx, Entity).values(
        [
            {
                "id": uuid.uuid4(),
                "tenant_id": tenant_id,
                "user_id": user_id,
                "name": e.name,
                "name_key": e.name_key,
                "entity_type": e.entity_type,
                "learned_at": now,
                "updated_at": now,
            }
            for e in unique.values()
        ]
    )
    await tx.execute(
        stmt.on_conflict_do_nothing(index_elements=["tenant_id", "user_id", "name_key"])
    )
    rows = (
        (
            await tx.execute(
                sa.select(Entity)
                .where(
                    Entity.tenant_id == tenant_id,
                    Entity.user_id == user_id,
                    Entity.name_key.in_(list(unique)),
                )
                .execution_options(populate_existing=True)
            )
        )
        .scalars()
        .all()
    )
    found = {row.name_key: row for row in rows}
    for key, e in unique.items():
        row = found[key]
        if row.entity_type is None and e.entity_type:
            await tx.execute(
                sa.update(Entity)
                .where(Entity.tenant_id == tenant_id, Entity.id == row.id)
                .values(entity_type=e.entity_type, updated_at=now)
            )
            row.entity_type = e.entity_type
    return found


def _current(at: datetime | None) -> sa.ColumnElement[bool]:
    """Relations believed now (not retracted) and true at `at` (None: now, i.e. not ended)."""
    believed = Relation.retracted_at.is_(None)
    if at is None:
        return sa.and_(believed, Relation.valid_to.is_(None))
    return sa.and_(
        believed,
        sa.or_(Relation.valid_from.is_(None), Relation.valid_from <= at),
        sa.or_(Relation.valid_to.is_(None), Relation.valid_to > at),
    )


async def find_current(
    tx: AsyncSession,
    tenant_id: str,
    user_id: str,
    subject_id: uuid.UUID,
    predicate: str,
    object_id: uuid.UUID,
) -> Relation | None:
    stmt = sa.select(Relation).where(
        Relation.tenant_id == tenant_id,
        Relation.user_id == user_id,
        Relation.subject_id == subject_id,
        Relation.predicate == predicate,
        Relation.object_id == object_id,
        _current(None),
    )
    return (await tx.execute(stmt.limit(1))).scalar_one_or_none()


async def insert_relations(tx: AsyncSession, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        await tx.execute(sa.insert(Relation), list(rows))


async def end_of_memories(
    tx: AsyncSession, tenant_id: str, memory_ids: Sequence[uuid.UUID], at: datetime
) -> int:
    """End the current relations restating these facts (superseded or contradicted)."""
    if not memory_ids:
        return 0
    result = await tx.execute(
        sa.update(Relation)
        .where(
            Relation.tenant_id == tenant_id,
            Relation.memory_id.in_(list(memory_ids)),
            Relation.valid_to.is_(None),
        )
        .values(valid_to=at)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


async def search_entities(
    tx: AsyncSession,
    tenant_id: str,
    user_id: str,
    q: str | None,
    *,
    after: tuple[int, int, str] | None = None,
    limit: int,
) -> list[Entity]:
    """The user's entities whose name contains `q` (case-folded); exact matches first, then
    shorter names, then by name. `after`: the key (`entity_order`) of the last entity of the
    page before; a keyset, so the order has no ties (`name_key` is unique per user)."""
    stmt = sa.select(Entity).where(Entity.tenant_id == tenant_id, Entity.user_id == user_id)
    rank: Any = sa.literal(0)
    if q:
        stmt = stmt.where(Entity.name_key.like(f"%{_like_escape(q)}%", escape="\\"))
        rank = sa.case((Entity.name_key == q, 0), else_=1)
    key = (rank, sa.func.length(Entity.name_key), Entity.name_key)
    if after is not None:
        stmt = stmt.where(sa.tuple_(*key) > sa.tuple_(*after))
    stmt = stmt.order_by(*key).limit(limit)
    return list((await tx.execute(stmt)).scalars().all())


def entity_order(entity: Entity, q: str | None) -> tuple[int, int, str]:
    """An entity's place in `search_entities`' order for `q`."""
    return (0 if not q or entity.name_key == q else 1, len(entity.name_key), entity.name_key)


async def entity_by_key(
    tx: AsyncSession, tenant_id: str, user_id: str, name_key: str
) -> Entity | None:
    stmt = sa.select(Entity).where(
        Entity.tenant_id == tenant_id, Entity.user_id == user_id, Entity.name_key == name_key
    )
    return (await tx.execute(stmt)).scalar_one_or_none()


async def entity_by_id(
    tx: AsyncSession, tenant_id: str, user_id: str, entity_id: uuid.UUID
) -> Entity | None:
    stmt = sa.select(Entity).where(
        Entity.tenant_id == tenant_id, Entity.user_id == user_id, Entity.id == entity_id
    )
    return (await tx.execute(stmt)).scalar_one_or_none()


def _touches_by_index(
    tenant_id: str, user_id: str, entity_id: sa.ColumnElement[uuid.UUID]
) -> sa.ColumnElement[bool]:
    """The relations at either end of `entity_id`, in the form SQLite plans well.

    SQLite plans an `OR` of the two ends (and a join to a union of both orientations) as a
    scan of every relation of the user per frontier row; a correlated `id IN (by subject
    UNION ALL by object)` is an index search on each end. On PostgreSQL that form is a
    subplan per relation row, and the `OR` a bitmap OR of the two indexes per frontier row:
    each database gets the form it plans well."""
    by_subject = sa.orm.aliased(Relation)
    by_object = sa.orm.aliased(Relation)
    return Relation.id.in_(
        sa.union_all(
            sa.select(by_subject.id).where(
                by_subject.tenant_id == tenant_id,
                by_subject.user_id == user_id,
                by_subject.subject_id == entity_id,
            ),
            sa.select(by_object.id).where(
                by_object.tenant_id == tenant_id,
                by_object.user_id == user_id,
                by_object.object_id == entity_id,
            ),
        )
    )


async def neighbors(
    tx: AsyncSession,
    tenant_id: str,
    user_id: str,
    start: uuid.UUID,
    *,
    depth: int,
    at: datetime | None,
    limit: int,
) -> tuple[list[tuple[Entity, int]], list[Relation]]:
    """The entities within `depth` hops of `start` along relations true at `at` (either
    direction), each at its shortest distance, and the relations between them.

    One recursive CTE: the walk carries (entity, hops) and stops at `depth`; `UNION` (not
    `UNION ALL`) drops repeated rows, so a cycle costs at most `depth` rounds."""
    current = _current(at)
    walk = sa.select(
        sa.literal(start, sa.Uuid()).label("entity_id"), sa.literal(0, sa.Integer()).label("hops")
    ).cte("walk", recursive=True)
    scope = sa.and_(Relation.tenant_id == tenant_id, Relation.user_id == user_id, current)
    touches = sa.or_(
        Relation.subject_id == walk.c.entity_id, Relation.object_id == walk.c.entity_id
    )
    dialect = tx.bind.dialect.name if tx.bind is not None else "postgresql"
    if dialect == "sqlite":
        touches = _touches_by_index(tenant_id, user_id, walk.c.entity_id)
    step = sa.and_(scope, touches)
    other_end = sa.case(
        (Relation.subject_id == walk.c.entity_id, Relation.object_id), else_=Relation.subject_id
    )
    walk = walk.union(
        sa.select(other_end, (walk.c.hops + 1).label("hops"))
        .select_from(walk.join(Relation, step))
        .where(walk.c.hops < depth)
    )
    reached = (
        sa.select(walk.c.entity_id, sa.func.min(walk.c.hops).label("hops"))
        .group_by(walk.c.entity_id)
        .subquery("reached")
    )
    stmt = (
        sa.select(Entity, reached.c.hops)
        .join(reached, reached.c.entity_id == Entity.id)
        .where(Entity.tenant_id == tenant_id, Entity.user_id == user_id)
        .order_by(reached.c.hops, Entity.name_key)
        .limit(limit)
    )
    nodes = [(row[0], int(row[1])) for row in (await tx.execute(stmt)).all()]
    ids = [e.id for e, _ in nodes]
    if len(ids) < 2:
        return nodes, []
    rel_stmt = (
        sa.select(Relation)
        .where(
            Relation.tenant_id == tenant_id,
            Relation.user_id == user_id,
            current,
            Relation.subject_id.in_(ids),
            Relation.object_id.in_(ids),
        )
        .order_by(Relation.learned_at, Relation.id)
    )
    return nodes, list((await tx.execute(rel_stmt)).scalars().all())


def _mentions_session(tx: AsyncSession, session_id: str) -> sa.ColumnElement[bool]:
    """Relations whose `sources` name the session."""
    dialect = tx.bind.dialect.name if tx.bind is not None else "postgresql"
    if dialect == "postgresql":
        return Relation.sources.op("@>")(sa.cast([{"session_id": session_id}], JSONB))
    each = sa.func.json_each(Relation.sources).table_valued("value").alias("src")
    return sa.exists(
        sa.select(1)
        .select_from(each)
        .where(sa.func.json_extract(each.c.value, "$.session_id") == session_id)
    )


async def lock_of_session(
    tx: AsyncSession, tenant_id: str, user_id: str, session_id: str
) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """The sources of the user's relations that cite the session, locked in id order."""
    stmt = (
        sa.select(Relation.id, Relation.sources)
        .where(
            Relation.tenant_id == tenant_id,
            Relation.user_id == user_id,
            _mentions_session(tx, session_id),
        )
        .order_by(Relation.id)
        .with_for_update()
    )
    return {rid: list(sources or []) for rid, sources in (await tx.execute(stmt)).all()}


async def detach(
    tx: AsyncSession,
    tenant_id: str,
    user_id: str,
    doomed: Sequence[uuid.UUID],
    shrink: dict[uuid.UUID, list[dict[str, Any]]],
) -> None:
    """Delete relations, shrink others' sources, then the user's entities no relation
    names any more (a name is itself something the erased session said)."""
    if doomed:
        await tx.execute(
            sa.delete(Relation).where(
                Relation.tenant_id == tenant_id, Relation.id.in_(list(doomed))
            )
        )
    for rid, sources in shrink.items():
        await tx.execute(
            sa.update(Relation)
            .where(Relation.tenant_id == tenant_id, Relation.id == rid)
            .values(sources=sources)
        )
    if not doomed:
        return
    named = sa.union_all(
        sa.select(Relation.subject_id).where(
            Relation.tenant_id == tenant_id, Relation.user_id == user_id
        ),
        sa.select(Relation.object_id).where(
            Relation.tenant_id == tenant_id, Relation.user_id == user_id
        ),
    )
    await tx.execute(
        sa.delete(Entity).where(
            Entity.tenant_id == tenant_id,
            Entity.user_id == user_id,
            Entity.id.not_in(named),
        )
    )


async def current_of(
    tx: AsyncSession, tenant_id: str, user_id: str, subject_id: uuid.UUID, predicate: str
) -> list[Relation]:
    """The subject's current relations of a predicate, locked in id order: a single-valued
    one's newer statement ends them (offline extraction, app/services/graph_extraction.py)."""
    stmt = (
        sa.select(Relation)
        .where(
            Relation.tenant_id == tenant_id,
            Relation.user_id == user_id,
            Relation.subject_id == subject_id,
            Relation.predicate == predicate,
            _current(None),
        )
        .order_by(Relation.id)
        .with_for_update()
    )
    return list((await tx.execute(stmt)).scalars().all())


async def end_relations(
    tx: AsyncSession, tenant_id: str, ends: Sequence[tuple[uuid.UUID, datetime]]
) -> None:
    """Each relation stops holding at its time; the row stays (history, `as_of`)."""
    for relation_id, at in ends:
        await tx.execute(
            sa.update(Relation)
            .where(Relation.tenant_id == tenant_id, Relation.id == relation_id)
            .values(valid_to=at)
        )


async def known_names(
    tx: AsyncSession, tenant_id: str, user_id: str, keys: Sequence[str]
) -> dict[str, str]:
    """What these name keys are in the user's graph (`app.core.entities.resolve`): an
    entity's own key -> its name; a one-word key -> the people whose name starts or ends
    with that word; an alias's key (`also_known_as`) -> the name of the entity it is of."""
    if not keys:
        return {}
    words = [k for k in keys if " " not in k]
    match = [Entity.name_key.in_(list(keys))]
    for w in words:
        escaped = _like_escape(w)
        match.append(Entity.name_key.like(f"{escaped} %", escape="\\"))
        match.append(Entity.name_key.like(f"% {escaped}", escape="\\"))
    found: dict[str, str] = {}
    scope = (Entity.tenant_id == tenant_id, Entity.user_id == user_id)
    stmt = sa.select(Entity.name_key, Entity.name, Entity.entity_type).where(*scope, sa.or_(*match))
    for key, name, kind in (await tx.execute(stmt.limit(1000))).all():
        if key in keys or kind == "person":
            found[key] = name
    subject = sa.orm.aliased(Entity)
    alias = sa.orm.aliased(Entity)
    aliases = (
        sa.select(alias.name_key, subject.name)
        .select_from(Relation)
        .join(subject, subject.id == Relation.subject_id)
        .join(alias, alias.id == Relation.object_id)
        .where(
            Relation.tenant_id == tenant_id,
            Relation.user_id == user_id,
            Relation.predicate == "also_known_as",
            _current(None),
            subject.tenant_id == tenant_id,
            subject.user_id == user_id,
            alias.tenant_id == tenant_id,
            alias.user_id == user_id,
            alias.name_key.in_(list(keys)),
        )
    )
    for key, name in (await tx.execute(aliases)).all():
        found[key] = name
    return found
