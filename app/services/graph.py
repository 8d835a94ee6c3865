"""The knowledge graph (docs/facts.md): triples written by callers or extracted with the
facts, entity look-up, and neighbours within 1–3 hops at a point in valid time."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from app.core import graph
from app.errors import EntityNotFound
from app.schemas.common import Source
from app.schemas.graph import (
    EntityOut,
    EntityPage,
    Neighborhood,
    NeighborOut,
    RelationOut,
    TriplesIn,
    TriplesOut,
)
from app.services.cursors import encode_cursor, rank_length_name
from app.services.ingest import writable
from app.stores import graph as graph_store
from app.stores.db import Database
from app.stores.models import Entity, Relation

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession


@dataclass(frozen=True, slots=True)
class TripleSpec:
    """One relation to record, from a caller or from extraction."""

    subject: str
    predicate: str
    object: str
    subject_type: str | None = None
    object_type: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    sources: Sequence[dict[str, Any]] = ()
    memory_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class Written:
    created: list[Relation]
    existing: list[Relation]
    entities: dict[uuid.UUID, Entity]


async def write_triples(
    tx: AsyncSession, tenant_id: str, user_id: str, triples: Sequence[TripleSpec], now: datetime
) -> Written:
    """Record triples in the caller's transaction: their entities created where missing;
    a relation already current (same subject, predicate, object) is not repeated."""
    names = [
        graph_store.NewEntity(graph.clean_name(name), graph.name_key(name), kind)
        for t in triples
        for name, kind in ((t.subject, t.subject_type), (t.object, t.object_type))
    ]
    by_key = await graph_store.ensure_entities(tx, tenant_id, user_id, names, now)
    created: list[Relation] = []
    existing: list[Relation] = []
    rows: list[dict[str, Any]] = []
    seen: set[tuple[uuid.UUID, str, uuid.UUID]] = set()
    for t in triples:
        subject = by_key[graph.name_key(t.subject)]
        obj = by_key[graph.name_key(t.object)]
        predicate = graph.clean_predicate(t.predicate)
        key = (subject.id, predicate, obj.id)
        ended = t.valid_to is not None
        if key in seen and not ended:
            continue
        current = (
            None
            if ended
            else await graph_store.find_current(
                tx, tenant_id, user_id, subject.id, predicate, obj.id
            )
        )
        if current is not None:
            existing.append(current)
            continue
        seen.add(key)
        row = {
            "id": uuid.uuid4(),
            "tenant_id": tenant_id,
            "user_id": user_id,
            "subject_id": subject.id,
            "predicate": predicate,
            "object_id": obj.id,
            "valid_from": t.valid_from,
            "valid_to": t.valid_to,
            "learned_at": now,
            "retracted_at": None,
            "memory_id": t.memory_id,
            "sources": list(t.sources),
        }
        rows.append(row)
        created.append(Relation(**row))
    await graph_store.insert_relations(tx, rows)
    return Written(created, existing, {e.id: e for e in by_key.values()})


class GraphService:
    def __init__(self, db: Database, *, max_nodes: int = 500) -> None:
        self.db = db
        self.max_nodes = max_nodes  # a neighbourhood's size cap (a hub at depth 3 is big)

    async def add_triples(self, tenant_id: str, user_id: str, body: TriplesIn) -> TriplesOut:
        specs = [
            TripleSpec(
                t.subject,
                t.predicate,
                t.object,
                t.subject_type,
                t.object_type,
                t.valid_from,
                t.valid_to,
            )
            for t in body.triples
        ]
        now = datetime.now(UTC)
        async with self.db.transaction() as tx:
            # As every write for a user: the user row exists (so export and erasure find
            # what is written), and nothing is written while their erasure runs.
            await writable(tx, tenant_id, user_id, now)
            written = await write_triples(tx, tenant_id, user_id, specs, now)
        names = {e.id: e.name for e in written.entities.values()}
        return TriplesOut(
            created=len(written.created),
            existing=len(written.existing),
            relations=[relation_out(r, names) for r in (*written.created, *written.existing)],
        )

    async def entities(
        self, tenant_id: str, user_id: str, q: str | None, *, limit: int, cursor: str | None = None
    ) -> EntityPage:
        key = graph.name_key(q) if q else None
        after = rank_length_name(cursor)
        async with self.db.read() as tx:
            rows = await graph_store.search_entities(
                tx, tenant_id, user_id, key, after=after, limit=limit + 1
            )
        more = len(rows) > limit
        rows = rows[:limit]
        last = graph_store.entity_order(rows[-1], key) if more and rows else None
        return EntityPage(
            items=[entity_out(e) for e in rows],
            next_cursor=encode_cursor(*last) if last is not None else None,
        )

    async def neighbors(
        self, tenant_id: str, user_id: str, entity: str, *, depth: int, as_of: datetime | None
    ) -> Neighborhood:
        async with self.db.read() as tx:
            start = await self._entity(tx, tenant_id, user_id, entity)
            nodes, relations = await graph_store.neighbors(
                tx, tenant_id, user_id, start.id, depth=depth, at=as_of, limit=self.max_nodes
            )
        names = {e.id: e.name for e, _ in nodes}
        return Neighborhood(
            entity=entity_out(start),
            depth=depth,
            nodes=[NeighborOut(**entity_out(e).model_dump(), depth=d) for e, d in nodes],
            relations=[relation_out(r, names) for r in relations],
        )

    @staticmethod
    async def _entity(tx: AsyncSession, tenant_id: str, user_id: str, entity: str) -> Entity:
        """By name (case-folded), else by id."""
        found = await graph_store.entity_by_key(tx, tenant_id, user_id, graph.name_key(entity))
        if found is None:
            try:
                found = await graph_store.entity_by_id(tx, tenant_id, user_id, uuid.UUID(entity))
            except ValueError:
                found = None
        if found is None:
            raise EntityNotFound(entity)
        return found


def entity_out(e: Entity) -> EntityOut:
    return EntityOut(id=e.id, name=e.name, entity_type=e.entity_type, learned_at=e.learned_at)


def relation_out(r: Relation, names: dict[uuid.UUID, str]) -> RelationOut:
    return RelationOut(
        id=r.id,
        subject=names.get(r.subject_id, str(r.subject_id)),
        predicate=r.predicate,
        object=names.get(r.object_id, str(r.object_id)),
        valid_from=r.valid_from,
        valid_to=r.valid_to,
        learned_at=r.learned_at,
        memory_id=r.memory_id,
        sources=[Source.model_validate(s) for s in r.sources or []],
    )
