"""The `reindex` job: rebuild the vector index from SQL (app/services/reindex.py).

A worker enqueues it at start when the index's collection holds no points while SQL holds
live memories (a new index schema or embedding model means a new, empty collection; so does
a lost Qdrant volume). The job belongs to the system tenant and is keyed by the collection's
name, so workers starting together enqueue it once, and a collection is rebuilt once.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from app.jobs.registry import SYSTEM_TENANT, JobContext, Registry
from app.services.reindex import Reindexer
from app.stores import jobs as job_store
from app.stores import memories as memory_store
from app.stores.db import Database
from app.stores.models import Job
from app.stores.vectors import VectorIndex

REINDEX = "reindex"

log = logging.getLogger("strata.reindex")


def register(registry: Registry, reindexer: Reindexer) -> None:
    async def reindex(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        # Upserts by memory id: a run after a crash starts over and rewrites the same points.
        result = await reindexer.rebuild()
        return {**result, "collection": reindexer.vectors.collection}

    registry.add(REINDEX, reindex)


async def enqueue_if_empty(db: Database, vectors: VectorIndex, *, max_attempts: int) -> Job | None:
    """The collection's reindex job when the index is empty and SQL is not; else None.
    Idempotent by key (the collection name): a second worker gets the same job."""
    if await vectors.count() > 0:
        return None
    async with db.read() as tx:
        if not await memory_store.any_live(tx):
            return None
    now = datetime.now(UTC)
    async with db.transaction() as tx:
        job, created = await job_store.enqueue(
            tx,
            tenant_id=SYSTEM_TENANT,
            kind=REINDEX,
            key=vectors.collection,
            payload={"collection": vectors.collection},
            due_at=now,
            max_attempts=max_attempts,
            now=now,
        )
    if created:
        log.info("index %s is empty: reindex job %s enqueued", vectors.collection, job.id)
    return job
