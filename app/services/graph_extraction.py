"""The graph and the profile without an LLM (docs/facts.md, "Without an LLM"): each promoted
user turn goes through the pattern extractor (`app.core.entities`), and what it states is
written in the promotion's own transaction — entities, relations with their sources, and a
profile fact (a semantic memory) per relation.

Relations are bi-temporal as every relation: a newer statement of a single-valued relation
(`lives_in`, `works_at`, `works_as`, `diet`) ends the current one (`valid_to`) and its fact
(`valid_to`, `superseded_by`); nothing is deleted. A statement older than the current one (a
history re-read by the `graph` maintenance task) is written as already ended. Facts have
ids derived from their message and text, so extracting a turn twice writes nothing twice.
Their points are built from the rows after the commit (`Reindexer.rebuild_rows`): a failure
there leaves a fact the profile shows and recall misses until a reindex, never a point
without its row.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from app.core import entities, keys
from app.core.audit import AuditEvent
from app.core.chunking import LogMessage, source_of
from app.core.dedupe import content_hash
from app.core.facts import ended_at, fact_id
from app.core.graph import clean_name, name_key
from app.services.graph import TripleSpec, write_triples
from app.services.indexing import log_message
from app.services.reindex import Reindexer
from app.stores import graph as graph_store
from app.stores import memories as memory_store
from app.stores import messages as message_store
from app.stores.db import Database
from app.stores.vectors import PayloadPatch, VectorIndex

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

FACT_IMPORTANCE = 0.6  # a stated fact about the user outranks small talk, not a pinned note
EXTRACTOR = "patterns"  # the facts' `metadata.extractor` (the LLM path's have none)


@dataclass(frozen=True, slots=True)
class Said:
    """What one user turn states."""

    source: dict[str, Any]  # {session_id, message_id, seq}
    at: datetime  # when it was said: the facts' valid time starts here
    found: entities.Extraction


@dataclass
class Written:
    facts: list[uuid.UUID] = field(default_factory=list)  # new fact rows, their points to build
    counts: dict[str, int] = field(
        default_factory=lambda: {"relations": 0, "confirmed": 0, "ended": 0, "entities": 0}
    )


class GraphExtraction:
    def __init__(self, vectors: VectorIndex, kinds: Iterable[str]) -> None:
        self.vectors = vectors
        self.kinds = frozenset(kinds)

    def extract(self, messages: Sequence[LogMessage]) -> list[Said]:
        """The user turns' statements (pure, CPU: run it off the event loop)."""
        out: list[Said] = []
        for m in messages:
            if m.role != "user" or not m.content.strip():
                continue
            found = entities.extract(m.content).only(self.kinds)
            if found.facts or found.mentions:
                out.append(Said(source_of(m), m.created_at, found))
        return out

    async def write(
        self,
        tx: AsyncSession,
        tenant_id: str,
        user_id: str,
        session_id: str,
        incarnation: str,
        said: Sequence[Said],
        now: datetime,
    ) -> Written:
        """Write the statements in the caller's transaction, in the order they were said."""
        written = Written()
        if not said:
            return written
        t, u = tenant_id, user_id
        names = {name_key(n) for s in said for n in _names(s.found)}
        known = await graph_store.known_names(tx, t, u, sorted(names - {entities.USER}))
        patches: list[tuple[uuid.UUID, PayloadPatch]] = []
        for s in said:
            found = entities.resolve(s.found, known)
            batch = keys.join(t, "offline", u, session_id, incarnation, str(s.source["seq"]))
            ids = {f: fact_id(batch, f.statement) for f in found.facts}
            done = await memory_store.ids_among(tx, t, u, list(ids.values()))
            mentions = [
                graph_store.NewEntity(clean_name(m.name), name_key(m.name), m.kind)
                for m in found.mentions
            ]
            by_key = await graph_store.ensure_entities(tx, t, u, mentions, now)
            written.counts["entities"] += len(by_key)
            for f in found.facts:
                if ids[f] in done:
                    continue  # this turn was extracted before (a re-run)
                await self._one(tx, t, u, s, f, ids[f], written, patches, now)
        # Under the row locks, before the commit: if the index fails, nothing moves.
        kept = [p for p in patches if p[0] not in set(written.facts)]
        await self.vectors.set_payload(kept, owner=(tenant_id, user_id))
        return written

    async def _one(
        self,
        tx: AsyncSession,
        t: str,
        u: str,
        said: Said,
        f: entities.Fact,
        new_id: uuid.UUID,
        written: Written,
        patches: list[tuple[uuid.UUID, PayloadPatch]],
        now: datetime,
    ) -> None:
        subject_type = None if f.subject == entities.USER else f.subject_type
        ends = await graph_store.ensure_entities(
            tx,
            t,
            u,
            [
                graph_store.NewEntity(clean_name(f.subject), name_key(f.subject), subject_type),
                graph_store.NewEntity(clean_name(f.object), name_key(f.object), f.object_type),
            ],
            now,
        )
        subject, obj = ends[name_key(f.subject)], ends[name_key(f.object)]
        current = await graph_store.find_current(tx, t, u, subject.id, f.predicate, obj.id)
        if current is not None:
            written.counts["confirmed"] += 1
            return
        valid_to: datetime | None = None
        if f.single:
            olds = [
                r
                for r in await graph_store.current_of(tx, t, u, subject.id, f.predicate)
                if r.object_id != obj.id
            ]
            newer = [r for r in olds if r.valid_from is not None and r.valid_from > said.at]
            if newer:  # said before what is current: history, ended when the newer began
                valid_to = min(r.valid_from for r in newer if r.valid_from is not None)
            else:
                await self._end(tx, t, u, olds, said.at, new_id, written, patches, now)
        await memory_store.insert_many(tx, [_fact_row(t, u, said, f, new_id, now)])
        created = AuditEvent(
            t,
            u,
            new_id,
            "created",
            old=None,
            new={"content": f.statement, "sources": [said.source]},
            reason=f"extracted without an LLM ({f.kind}: {f.predicate})",
            at=now,
        )
        if valid_to is not None:
            await memory_store.end_validity(
                tx, t, new_id, valid_to=valid_to, superseded_by=None, now=now
            )
        await memory_store.add_events(tx, [created])
        await write_triples(
            tx,
            t,
            u,
            [
                TripleSpec(
                    entities.USER if f.subject == entities.USER else f.subject,
                    f.predicate,
                    f.object,
                    subject_type,
                    f.object_type,
                    valid_from=said.at,
                    valid_to=valid_to,
                    sources=[said.source],
                    memory_id=new_id,
                )
            ],
            now,
        )
        written.facts.append(new_id)
        written.counts["relations"] += 1

    async def _end(
        self,
        tx: AsyncSession,
        t: str,
        u: str,
        olds: Sequence[Any],
        at: datetime,
        successor: uuid.UUID,
        written: Written,
        patches: list[tuple[uuid.UUID, PayloadPatch]],
        now: datetime,
    ) -> None:
        """End the relations a newer statement replaces, and the facts they restate."""
        if not olds:
            return
        await graph_store.end_relations(tx, t, [(r.id, ended_at(r.valid_from, at)) for r in olds])
        written.counts["ended"] += len(olds)
        facts = await memory_store.lock_facts(
            tx, t, u, [r.memory_id for r in olds if r.memory_id is not None]
        )
        for old in facts.values():
            if old.valid_to is not None:
                continue
            valid_to = ended_at(old.valid_from, at)
            await memory_store.end_validity(
                tx, t, old.id, valid_to=valid_to, superseded_by=successor, now=now
            )
            patches.append((old.id, PayloadPatch(valid_to=valid_to)))
            await memory_store.add_events(
                tx,
                [
                    AuditEvent(
                        t,
                        u,
                        old.id,
                        "superseded",
                        old={"content": old.content, "valid_to": None},
                        new={"valid_to": valid_to.isoformat(), "superseded_by": str(successor)},
                        reason="a newer statement of the same relation (extracted without an LLM)",
                        at=now,
                    )
                ],
            )


def _names(found: entities.Extraction) -> set[str]:
    out = {m.name for m in found.mentions}
    for f in found.facts:
        out.update((f.subject, f.object))
    return out


class GraphBackfill:
    """The `graph` maintenance task: extraction over what was promoted before (an import
    made before offline extraction, or with it off), page by page, each page in one
    transaction; idempotent (a turn extracted before is skipped by its facts' ids)."""

    PAGE = 500

    def __init__(self, db: Database, extraction: GraphExtraction, reindexer: Reindexer) -> None:
        self.db = db
        self.extraction = extraction
        self.reindexer = reindexer

    async def run(
        self, tenant_id: str | None, user_id: str | None, *, dry_run: bool = False
    ) -> dict[str, Any]:
        totals = {"turns": 0, "statements": 0, "relations": 0, "confirmed": 0, "ended": 0}
        after: tuple[str, str, str, int] | None = None
        while True:
            async with self.db.read() as tx:
                page = await message_store.promoted_user_turns(
                    tx, tenant_id, user_id, after=after, limit=self.PAGE
                )
            if not page:
                break
            last = page[-1].message
            after = (last.tenant_id, last.user_id, last.session_id, last.seq)
            groups: dict[tuple[str, str, str, str], list[LogMessage]] = {}
            for turn in page:
                m = turn.message
                key = (m.tenant_id, m.user_id, m.session_id, turn.incarnation)
                groups.setdefault(key, []).append(log_message(m))
            said = {
                key: await asyncio.to_thread(self.extraction.extract, messages)
                for key, messages in groups.items()
            }
            totals["turns"] += len(page)
            totals["statements"] += sum(len(s.found.facts) for v in said.values() for s in v)
            if dry_run:
                continue
            now = datetime.now(UTC)
            new: dict[str, list[uuid.UUID]] = {}
            async with self.db.transaction() as tx:
                for (t, u, session_id, incarnation), statements in said.items():
                    if not statements:
                        continue
                    written = await self.extraction.write(
                        tx, t, u, session_id, incarnation, statements, now
                    )
                    new.setdefault(t, []).extend(written.facts)
                    for name in ("relations", "confirmed", "ended"):
                        totals[name] += written.counts[name]
            for t, ids in new.items():
                await self._points(t, ids)
        return {"dry_run": dry_run, **totals}

    async def _points(self, tenant_id: str, ids: list[uuid.UUID]) -> None:
        if not ids:
            return
        async with self.db.read() as tx:
            rows = await memory_store.get_many(tx, tenant_id, ids)
        live = [r for r in rows if r.deleted_at is None]
        if live:
            await self.reindexer.rebuild_rows(live)


def _fact_row(
    t: str, u: str, said: Said, f: entities.Fact, new_id: uuid.UUID, now: datetime
) -> memory_store.MemoryValues:
    """The memory row of a fact found without an LLM: a semantic memory, valid from when
    it was said."""
    return {
        "id": new_id,
        "tenant_id": t,
        "user_id": u,
        "session_id": said.source["session_id"],
        "memory_type": "semantic",
        "content": f.statement,
        "importance": FACT_IMPORTANCE,
        "access_count": 0,
        "last_accessed_at": None,
        "strength": 1.0,
        "pinned": False,
        "valid_from": said.at,
        "sources": [said.source],
        "metadata_": {"extractor": EXTRACTOR},
        "content_hash": content_hash(f.statement),
        "created_at": said.at,
        "updated_at": now,
    }
