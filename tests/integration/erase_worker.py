"""An erasure worker process for the kill test (test_erase_kill.py): `python -m
tests.integration.erase_worker`.

It runs the job side of `app.worker` with the real `erase_user` handler, without promotion
and the embedding model, which the erasure does not use. Full: PostgreSQL, Redis and a
Qdrant index on disk (qdrant-client's local mode). Embedded (no `STRATA_QDRANT_URL`): the
SQLite file, Qdrant Edge on disk and an in-process buffer. Its first attempt pauses after its
first batch: the window in which the test kills the process."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import Any

import fakeredis
from redis.asyncio import Redis

from app.jobs import tasks as job_tasks
from app.jobs.catalog import build_registry
from app.jobs.registry import JobContext
from app.services.jobs import JobService
from app.services.users import ERASE_USER, ErasureService
from app.settings import Settings
from app.stores.buffer import Buffer
from app.stores.db import Database, create_engine
from app.stores.qdrant_edge import QdrantEdgeIndex
from app.stores.qdrant_server import QdrantServerIndex
from app.stores.vectors import VectorIndex

COLLECTION = "erase_kill"
DIM = 4
BATCH = 2


def open_index(qdrant_url: str | None, data_dir: Path) -> VectorIndex:
    """The test's index: the server code path in local mode, or Qdrant Edge."""
    if qdrant_url is not None:
        return QdrantServerIndex.connect(qdrant_url, None, COLLECTION, DIM)
    return QdrantEdgeIndex(data_dir / "qdrant", COLLECTION, DIM)


class PausingEraser(ErasureService):
    pause = False

    async def after_batch(self, step: str) -> None:
        if self.pause:
            logging.getLogger("strata.worker").info("paused after a batch of %s", step)
            await asyncio.sleep(120)


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    settings = Settings()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    db = Database(
        create_engine(settings.database_dsn),
        create_engine(settings.database_dsn, readonly=True) if settings.is_sqlite else None,
    )
    buffer = Buffer(
        Redis.from_url(settings.redis_url.get_secret_value())
        if settings.redis_url is not None
        else fakeredis.FakeAsyncRedis(),
        window=50,
        ttl_seconds=600,
    )
    vectors = open_index(settings.qdrant_url, settings.data_dir)
    await vectors.ensure_collection()
    eraser = PausingEraser(db, buffer, vectors, max_attempts=5, wait_seconds=0, batch=BATCH)

    async def erase_user(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        eraser.pause = ctx.attempt == 1
        return await eraser.run(ctx.tenant_id, str(payload["user_id"]), ctx.job_id)

    try:
        registry = build_registry(
            settings, jobs=JobService(db, max_attempts=settings.job_max_attempts)
        )
        registry.add(ERASE_USER, erase_user)
        owner = f"erase-kill-test:{os.getpid()}"
        tasks = job_tasks.start(db, settings, owner, stop, registry)
        logging.getLogger("strata.worker").info("erase worker %s started", owner)
        await asyncio.gather(*tasks)
    finally:
        await vectors.close()
        await buffer.close()
        await db.close()


if __name__ == "__main__":
    asyncio.run(main())
