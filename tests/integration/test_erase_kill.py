"""The erasure kill test, in both modes: a worker SIGKILLed half-way through a user's
erasure; another takes the job over once the lease expires, finishes it, and the receipt
counts every row exactly once, whichever run deleted it. Embedded, the workers' buffer is
their own (in-process), so only the full mode checks the Redis keys."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import sqlalchemy as sa
from redis.asyncio import Redis

from app.core import terms
from app.core.audit import AuditEvent
from app.services.users import ErasureService
from app.stores import jobs as job_store
from app.stores import memories as memory_store
from app.stores import messages as message_store
from app.stores import sessions as session_store
from app.stores import users as user_store
from app.stores.buffer import Buffer, _window_key
from app.stores.db import Database, create_engine, migrate
from app.stores.models import Job, Memory, MemoryEvent, Message, Session
from app.stores.vectors import MemoryPayload, VectorIndex, VectorPoint
from tests.conftest import REDIS_URL
from tests.integration.erase_worker import open_index

ROOT = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 2.0
TENANT = "default"
SESSIONS = 6
MESSAGES = 5  # per session


@pytest.fixture(params=["full", "embedded"])
def mode(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
async def database(
    mode: str, pg_databases: Callable[[], Awaitable[str]], tmp_path: Path
) -> AsyncIterator[tuple[str, Database]]:
    dsn = await pg_databases() if mode == "full" else f"sqlite+aiosqlite:///{tmp_path}/strata.db"
    await migrate(dsn)
    reader = create_engine(dsn, readonly=True) if mode == "embedded" else None
    db = Database(create_engine(dsn), reader)
    yield dsn, db
    await db.close()


def index_url(mode: str, tmp_path: Path) -> str | None:
    return f"path:{tmp_path / 'qdrant'}" if mode == "full" else None


@pytest.fixture
async def redis(redis_client: Redis) -> Redis:
    return redis_client


@pytest.fixture
def start_worker(
    mode: str, database: tuple[str, Database], tmp_path: Path
) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    dsn, _ = database
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env.update(
        STRATA_DATABASE_URL=dsn,
        STRATA_JOB_LEASE_SECONDS=str(LEASE_SECONDS),
        STRATA_JOB_POLL_SECONDS="0.1",
        STRATA_DATA_DIR=str(tmp_path),
    )
    url = index_url(mode, tmp_path)
    if url is not None:
        env.update(STRATA_REDIS_URL=REDIS_URL, STRATA_QDRANT_URL=url)
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> subprocess.Popen[bytes]:
        with (tmp_path / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.erase_worker"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def logs(tmp_path: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(tmp_path.glob("*.log")))


async def until(
    what: str, check: Callable[[], Awaitable[bool]], tmp_path: Path, seconds: float = 30
) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, f"{what} did not happen\n{logs(tmp_path)}"
        await asyncio.sleep(0.05)


async def seed(db: Database, buffer: Buffer, vectors: VectorIndex, user: str) -> int:
    """Sessions with logs and windows, one memory per message with its audit event and its
    point; a second user beside. The number of memories."""
    now = datetime.now(UTC)
    points: list[VectorPoint] = []
    async with db.transaction() as tx:
        for owner in (user, "bystander"):
            await session_store.ensure_user(tx, TENANT, owner, now)
            for s in range(SESSIONS):
                sid = f"{owner}-s{s}"
                await session_store.create_or_lock(
                    tx,
                    tenant_id=TENANT,
                    session_id=sid,
                    user_id=owner,
                    system_prompt=None,
                    metadata={},
                    now=now,
                )
                rows: list[dict[str, Any]] = [
                    {
                        "tenant_id": TENANT,
                        "session_id": sid,
                        "seq": seq,
                        "client_id": None,
                        "user_id": owner,
                        "role": "user",
                        "content": f"secret {owner} {s}.{seq}",
                        "metadata_": {},
                        "created_at": now,
                        "received_at": now,
                    }
                    for seq in range(1, MESSAGES + 1)
                ]
                await message_store.insert_many(tx, rows)
                await session_store.advance_last_seq(tx, TENANT, owner, sid, MESSAGES, now)
                await buffer.push(
                    TENANT, owner, sid, [{"seq": r["seq"], "content": r["content"]} for r in rows]
                )
                for r in rows:
                    mid = uuid.uuid4()
                    values: memory_store.MemoryValues = {
                        "id": mid,
                        "tenant_id": TENANT,
                        "user_id": owner,
                        "session_id": sid,
                        "memory_type": "episodic",
                        "content": str(r["content"]),
                        "importance": 0.5,
                        "access_count": 0,
                        "last_accessed_at": None,
                        "strength": 1.0,
                        "pinned": False,
                        "valid_from": now,
                        "sources": [{"session_id": sid, "message_id": None, "seq": r["seq"]}],
                        "metadata_": {},
                        "content_hash": uuid.uuid4().hex,
                        "created_at": now,
                        "updated_at": now,
                    }
                    row = await memory_store.insert(tx, values)
                    await memory_store.add_events(
                        tx,
                        [
                            AuditEvent(
                                TENANT,
                                owner,
                                mid,
                                "created",
                                old=None,
                                new={"content": row.content},
                                reason="seeded",
                                at=now,
                            )
                        ],
                    )
                    points.append(
                        VectorPoint(
                            mid,
                            [1.0, 0.0, 0.0, float(len(points) % 7)],
                            terms.SparseVec([1], [1.0]),
                            MemoryPayload.from_row(row),
                        )
                    )
    await vectors.upsert(points)
    return SESSIONS * MESSAGES


async def test_an_erasure_killed_half_way_finishes_on_another_worker(
    mode: str,
    database: tuple[str, Database],
    redis: Redis,
    start_worker: Callable[[str], subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    _, db = database
    user = f"kill-{uuid.uuid4().hex[:8]}"
    full = mode == "full"
    buffer = Buffer(redis if full else fakeredis.FakeAsyncRedis(), window=50, ttl_seconds=600)
    # The test owns the on-disk index until the workers start (one process at a time).
    vectors = open_index(index_url(mode, tmp_path), tmp_path)
    await vectors.ensure_collection()
    memories = await seed(db, buffer, vectors, user)
    await vectors.close()

    service = ErasureService(db, buffer, vectors, max_attempts=5, wait_seconds=0)
    started = await service.request(TENANT, user, wait=False)
    assert started.state == "queued"
    assert started.job_id is not None
    job_id = started.job_id

    async def progress() -> dict[str, int]:
        async with db.read() as tx:
            row = await user_store.get(tx, TENANT, user)
        return dict((row.erasure or {}).get("counts") or {}) if row is not None else {}

    async def job() -> Job:
        async with db.read() as tx:
            row = await job_store.get(tx, TENANT, job_id)
        assert row is not None
        return row

    victim = start_worker("victim")

    async def half_way() -> bool:
        return "paused after a batch" in logs(tmp_path)

    await until("the first batch", half_way, tmp_path)
    partial = await progress()
    assert 0 < partial["sessions"] < SESSIONS  # half-way: some sessions gone, some not
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=10) == -signal.SIGKILL
    killed = await job()
    assert (killed.state, killed.attempts) == ("running", 1)
    # Still marked: writes for the user are refused until the erasure ends.
    assert (await service.request(TENANT, user, wait=False)).job_id == job_id

    survivor = start_worker("survivor")

    async def succeeded() -> bool:
        return (await job()).state == "succeeded"

    await until("the takeover", succeeded, tmp_path)
    done = await job()
    assert done.attempts == 2
    assert done.result is not None
    counts = done.result["counts"]
    # Exact across the two runs: each batch's rows and counts committed together.
    assert counts["sessions"] == SESSIONS
    assert counts["messages"] == SESSIONS * MESSAGES
    assert counts["memories"] == memories
    assert counts["memory_events"] == memories
    assert counts["buffer_keys"] == (SESSIONS if full else 0)
    assert counts["index_points"] == memories

    async with db.read() as tx:
        columns: list[Any] = [Session.user_id, Message.user_id, Memory.user_id, MemoryEvent.user_id]
        for column in columns:
            left = await tx.execute(sa.select(sa.func.count()).where(column == user))
            assert left.scalar_one() == 0, column
            kept = await tx.execute(sa.select(sa.func.count()).where(column == "bystander"))
            assert kept.scalar_one() > 0, column
        assert await user_store.get(tx, TENANT, user) is None
    if full:
        windows = [_window_key(TENANT, user, f"{user}-s{s}") for s in range(SESSIONS)]
        assert await redis.exists(*windows) == 0
        assert await redis.exists(_window_key(TENANT, "bystander", "bystander-s0")) == 1

    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(timeout=15) == 0, logs(tmp_path)
    index = open_index(index_url(mode, tmp_path), tmp_path)
    await index.ensure_collection()
    try:
        assert await index.delete_user(TENANT, user) == 0
        assert await index.delete_user(TENANT, "bystander") == SESSIONS * MESSAGES
    finally:
        await index.close()
    # Asked again afterwards: nothing held, a receipt of zeros.
    again = await service.request(TENANT, user, wait=False)
    assert again.job_id is None
    assert set(again.counts.model_dump().values()) == {0}
