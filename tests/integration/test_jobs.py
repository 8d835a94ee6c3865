"""The durable job runner on real PostgreSQL and SQLite: idempotent enqueue, claims that
never overlap, leases (renewed, expired, lost), backoff to a visible failure and a re-run,
and periodic schedules under a leader lease."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel

from app.jobs.registry import SYSTEM_TENANT, Handler, JobContext, Registry
from app.jobs.runner import JobRunner
from app.jobs.scheduler import Scheduler, period_start
from app.services.job_kinds import JobKind
from app.services.jobs import PURGE_FINISHED_JOBS, JobService
from app.services.users import ERASE_USER
from app.stores import jobs as job_store
from app.stores.db import Database, create_engine, migrate
from app.stores.models import Job

TENANT = "t-jobs"


@pytest.fixture(scope="module", params=["postgresql", "sqlite"])
async def db(
    request: pytest.FixtureRequest,
    pg_databases: Callable[[], Awaitable[str]],
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Database]:
    """A migrated database of each kind; tests keep apart by using their own job kinds."""
    if request.param == "postgresql":
        dsn = await pg_databases()
        database = Database(create_engine(dsn))
    else:
        dsn = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('jobs')}/jobs.db"
        database = Database(create_engine(dsn), create_engine(dsn, readonly=True))
    await migrate(dsn)
    yield database
    await database.close()


@pytest.fixture
async def pg(pg_databases: Callable[[], Awaitable[str]]) -> AsyncIterator[Database]:
    dsn = await pg_databases()
    await migrate(dsn)
    database = Database(create_engine(dsn))
    yield database
    await database.close()


@pytest.fixture
def kind() -> str:
    return f"test.{uuid.uuid4().hex[:8]}"


def make_runner(
    db: Database, handlers: dict[str, Handler], owner: str = "runner", lease: float = 30.0
) -> JobRunner:
    registry = Registry()
    for name, handler in handlers.items():
        registry.add(name, handler)
    return JobRunner(
        db,
        owner,
        registry,
        lease_seconds=lease,
        poll_seconds=0.05,
        retry_base_seconds=0.01,
        retry_max_seconds=0.05,
    )


async def enqueue(
    db: Database, kind: str, key: str, *, max_attempts: int = 3, tenant: str = TENANT
) -> Job:
    now = datetime.now(UTC)
    async with db.transaction() as tx:
        job, _ = await job_store.enqueue(
            tx,
            tenant_id=tenant,
            kind=kind,
            key=key,
            payload={"key": key},
            due_at=now,
            max_attempts=max_attempts,
            now=now,
        )
    return job


async def get(db: Database, job_id: uuid.UUID, tenant: str = TENANT) -> Job:
    async with db.read() as tx:
        job = await job_store.get(tx, tenant, job_id)
    assert job is not None
    return job


async def ok(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    return {"attempt": ctx.attempt}


async def test_enqueue_is_idempotent_by_key(db: Database, kind: str) -> None:
    now = datetime.now(UTC)
    made: list[tuple[Job, bool]] = []
    for tenant, key in [(TENANT, "a"), (TENANT, "a"), (TENANT, "b"), ("other", "a")]:
        async with db.transaction() as tx:
            made.append(
                await job_store.enqueue(
                    tx,
                    tenant_id=tenant,
                    kind=kind,
                    key=key,
                    payload={"n": len(made)},
                    due_at=now,
                    max_attempts=3,
                    now=now,
                )
            )
    (first, created1), (again, created2), (other_key, _), (other_tenant, _) = made
    assert (created1, created2) == (True, False)
    assert again.id == first.id
    assert again.payload == {"n": 0}  # the first enqueue's job, unchanged
    assert len({first.id, other_key.id, other_tenant.id}) == 3


async def test_concurrent_enqueues_of_one_key_make_one_job(pg: Database, kind: str) -> None:
    jobs = await asyncio.gather(*(enqueue(pg, kind, "same") for _ in range(8)))
    assert len({job.id for job in jobs}) == 1


async def test_a_second_claim_skips_locked_jobs_without_waiting(pg: Database, kind: str) -> None:
    for i in range(5):
        await enqueue(pg, kind, f"k{i}")
    now = datetime.now(UTC)
    lease = now + timedelta(minutes=1)
    async with pg.transaction() as first:
        mine = await job_store.claim(
            first, owner="a", kinds={kind}, now=now, lease_until=lease, limit=3
        )
        # The first claim's transaction is still open, its rows locked: the second skips
        # them instead of waiting for them (or, worse, claiming them too).
        async with pg.transaction() as second:
            theirs = await asyncio.wait_for(
                job_store.claim(
                    second, owner="b", kinds={kind}, now=now, lease_until=lease, limit=10
                ),
                timeout=5,
            )
    assert len(mine) == 3
    assert len(theirs) == 2
    assert not {j.id for j in mine} & {j.id for j in theirs}


async def test_concurrent_runners_run_each_job_once(pg: Database, kind: str) -> None:
    ids = {(await enqueue(pg, kind, f"k{i}")).id for i in range(24)}
    runs: Counter[uuid.UUID] = Counter()

    async def count(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        runs[ctx.job_id] += 1
        await asyncio.sleep(0.01)
        return {}

    runners = [make_runner(pg, {kind: count}, owner=f"r{i}") for i in range(4)]

    async def drain(runner: JobRunner) -> None:
        while await runner.run_once() is not None:
            pass

    await asyncio.gather(*(drain(r) for r in runners))
    assert runs == dict.fromkeys(ids, 1)
    assert {(await get(pg, i)).state for i in ids} == {"succeeded"}


async def test_a_failing_job_backs_off_then_fails_for_good(db: Database, kind: str) -> None:
    async def boom(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError(f"boom {ctx.attempt}")

    job = await enqueue(db, kind, "k", max_attempts=3)
    runner = make_runner(db, {kind: boom})
    assert await runner.run_once() == job.id
    after_one = await get(db, job.id)
    assert (after_one.state, after_one.attempts, after_one.last_error) == (
        "queued",
        1,
        "RuntimeError: boom 1",
    )
    assert after_one.due_at > after_one.created_at  # backed off, not due at once

    for _ in range(200):
        if (await get(db, job.id)).state == "failed":
            break
        if await runner.run_once() is None:
            await asyncio.sleep(0.01)
    failed = await get(db, job.id)
    assert (failed.state, failed.attempts, failed.last_error) == (
        "failed",
        3,
        "RuntimeError: boom 3",
    )
    assert failed.finished_at is not None
    assert await runner.run_once() is None  # a failed job stays failed until re-run


class Batch(BaseModel):
    """The payload of a declared test kind."""

    key: str
    size: int


async def test_a_malformed_payload_fails_its_job_at_once_and_the_runner_goes_on(
    db: Database, kind: str
) -> None:
    """A stored payload its kind's model refuses fails that job for good, with the field
    named (a retry would read the same row); the runner lives and runs the next job."""
    seen: list[Batch] = []

    async def handle(ctx: JobContext, payload: Batch) -> dict[str, Any]:
        seen.append(payload)
        return {"size": payload.size}

    now = datetime.now(UTC)
    async with db.transaction() as tx:
        bad, _ = await job_store.enqueue(
            tx,
            tenant_id=TENANT,
            kind=kind,
            key="bad",
            payload={"key": "bad", "size": "many"},
            due_at=now - timedelta(seconds=1),
            max_attempts=3,
            now=now,
        )
        good, _ = await job_store.enqueue(
            tx,
            tenant_id=TENANT,
            kind=kind,
            key="good",
            payload=Batch(key="good", size=2).model_dump(mode="json"),
            due_at=now,
            max_attempts=3,
            now=now,
        )
    registry = Registry([JobKind(kind, Batch, handle)])
    runner = JobRunner(
        db,
        "runner",
        registry,
        lease_seconds=30,
        poll_seconds=0.05,
        retry_base_seconds=0.01,
        retry_max_seconds=0.05,
    )
    assert await runner.run_once() == bad.id
    failed = await get(db, bad.id)
    assert (failed.state, failed.attempts) == ("failed", 1)
    assert failed.last_error == (
        f"InvalidPayload: the payload of a {kind!r} job is not a Batch: "
        "size: Input should be a valid integer, unable to parse string as an integer"
    )
    assert await runner.run_once() == good.id
    done = await get(db, good.id)
    assert (done.state, done.result) == ("succeeded", {"size": 2})
    assert seen == [Batch(key="good", size=2)]
    assert await runner.run_once() is None  # the malformed job is not retried


async def test_an_expired_lease_is_taken_over(db: Database, kind: str) -> None:
    job = await enqueue(db, kind, "k")
    now = datetime.now(UTC)
    async with db.transaction() as tx:
        await job_store.claim(
            tx,
            owner="crashed",
            kinds={kind},
            now=now,
            lease_until=now + timedelta(seconds=1),
            limit=1,
        )
    survivor = make_runner(db, {kind: ok}, owner="survivor")
    assert await survivor.run_once() is None  # the lease still holds
    await asyncio.sleep(1.1)
    assert await survivor.run_once() == job.id
    done = await get(db, job.id)
    assert (done.state, done.attempts, done.result) == ("succeeded", 2, {"attempt": 2})


async def test_a_job_whose_last_attempt_died_is_failed_not_rerun(db: Database, kind: str) -> None:
    job = await enqueue(db, kind, "k", max_attempts=1)
    now = datetime.now(UTC)
    async with db.transaction() as tx:
        await job_store.claim(
            tx,
            owner="crashed",
            kinds={kind},
            now=now,
            lease_until=now + timedelta(seconds=0.1),
            limit=1,
        )
    await asyncio.sleep(0.2)
    assert await make_runner(db, {kind: ok}).run_once() is None
    failed = await get(db, job.id)
    assert (failed.state, failed.attempts) == ("failed", 1)
    assert failed.last_error is not None
    assert "lease expired" in failed.last_error


@pytest.mark.parametrize("outcome", ["returns", "raises"])
async def test_a_runner_that_lost_its_lease_records_nothing(
    db: Database, kind: str, outcome: str
) -> None:
    job = await enqueue(db, kind, "k")
    started, gate = asyncio.Event(), asyncio.Event()

    async def slow(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        started.set()
        await gate.wait()
        if outcome == "raises":
            raise RuntimeError("too late")
        return {"by": "a"}

    a = make_runner(db, {kind: slow}, owner="a", lease=60)
    running = asyncio.create_task(a.run_once())
    await asyncio.wait_for(started.wait(), 5)
    # Runner b arrives after a's lease has (by its clock) expired, takes over and finishes.
    later = datetime.now(UTC) + timedelta(minutes=2)
    async with db.transaction() as tx:
        [taken] = await job_store.claim(
            tx,
            owner="b",
            kinds={kind},
            now=later,
            lease_until=later + timedelta(minutes=1),
            limit=1,
        )
        assert await job_store.finish(tx, job_id=taken.id, owner="b", result={"by": "b"}, now=later)
    gate.set()
    assert await running == job.id
    done = await get(db, job.id)
    assert (done.state, done.attempts, done.result, done.last_error) == (
        "succeeded",
        2,
        {"by": "b"},
        None,
    )


async def test_the_heartbeat_keeps_a_long_job_and_cancels_it_once_lost(
    db: Database, kind: str
) -> None:
    started = asyncio.Event()

    async def long(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        started.set()
        await asyncio.sleep(2.0)  # over three lease lengths
        return {"done": True}

    job = await enqueue(db, kind, "long")
    a = make_runner(db, {kind: long}, owner="a", lease=0.6)
    b = make_runner(db, {kind: long}, owner="b", lease=0.6)
    running = asyncio.create_task(a.run_once())
    await asyncio.wait_for(started.wait(), 5)
    # b polls all along: were the lease not renewed, b would take the job over.
    while not running.done():
        assert await b.run_once() is None
        await asyncio.sleep(0.05)
    assert await running == job.id
    assert (await get(db, job.id)).attempts == 1

    cancelled = asyncio.Event()

    started.clear()

    async def forever(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return {}

    stuck = await enqueue(db, kind + ".stuck", "k")
    a = make_runner(db, {kind + ".stuck": forever}, owner="a", lease=0.6)
    running = asyncio.create_task(a.run_once())
    await asyncio.wait_for(started.wait(), 5)
    later = datetime.now(UTC) + timedelta(minutes=2)
    async with db.transaction() as tx:
        await job_store.claim(
            tx,
            owner="b",
            kinds={kind + ".stuck"},
            now=later,
            lease_until=later + timedelta(minutes=1),
            limit=1,
        )
    assert await asyncio.wait_for(running, 5) == stuck.id
    assert cancelled.is_set()
    taken = await get(db, stuck.id)
    assert (taken.state, taken.lease_owner) == ("running", "b")


async def test_leader_lease_is_held_by_one_owner_until_it_expires(db: Database) -> None:
    name = f"lease-{uuid.uuid4().hex[:8]}"
    now = datetime.now(UTC)
    until = now + timedelta(seconds=30)

    async def acquire(owner: str, at: datetime) -> bool:
        async with db.transaction() as tx:
            return await job_store.acquire_leader(
                tx, name=name, owner=owner, now=at, until=at + timedelta(seconds=30)
            )

    assert await acquire("a", now)
    assert not await acquire("b", now)
    assert await acquire("a", now + timedelta(seconds=10))  # renewed
    assert not await acquire("b", until)  # renewed past its first expiry
    assert await acquire("b", until + timedelta(seconds=11))  # a stopped renewing
    assert not await acquire("a", until + timedelta(seconds=12))
    async with db.transaction() as tx:
        await job_store.release_leader(tx, name=name, owner="a")  # not a's to release
    assert not await acquire("a", until + timedelta(seconds=12))
    async with db.transaction() as tx:
        await job_store.release_leader(tx, name=name, owner="b")
    assert await acquire("a", until + timedelta(seconds=12))


async def test_two_schedulers_enqueue_each_period_once(pg: Database, kind: str) -> None:
    registry = Registry()
    registry.add(kind, ok)
    registry.every(timedelta(hours=1), kind, name=kind)
    a, b = (
        Scheduler(pg, owner, registry.schedules, lease_seconds=30, tick_seconds=1, max_attempts=3)
        for owner in ("a", "b")
    )
    # Periods in the past, so that their jobs are due for the runner below.
    hour = period_start(datetime.now(UTC) - timedelta(hours=3), timedelta(hours=1))
    for minute in (1, 1, 2, 3):
        led = await asyncio.gather(
            a.tick(hour + timedelta(minutes=minute)), b.tick(hour + timedelta(minutes=minute))
        )
        assert sorted(map(len, led)) == [0, 1]  # one leader at a time
    # Whoever led stalls past its lease; the other takes over within the same hour, and
    # then the first again: the hour's job is not enqueued a second time.
    assert await b.tick(hour + timedelta(minutes=5)) == [kind]
    assert await a.tick(hour + timedelta(minutes=59)) == [kind]
    # The next hour's job, once.
    await asyncio.gather(a.tick(hour + timedelta(minutes=61)), b.tick(hour + timedelta(minutes=61)))

    runner = make_runner(pg, {kind: ok})
    ran = []
    while (job_id := await runner.run_once()) is not None:
        ran.append(await get(pg, job_id, SYSTEM_TENANT))
    assert sorted(j.key for j in ran) == [
        f"{kind}@{hour.isoformat()}",
        f"{kind}@{(hour + timedelta(hours=1)).isoformat()}",
    ]
    assert {j.due_at for j in ran} == {hour, hour + timedelta(hours=1)}


async def test_purge_finished_jobs_keeps_recent_and_failed_ones(db: Database, kind: str) -> None:
    now = datetime.now(UTC)

    async def finished(key: str, days_ago: float, *, succeed: bool) -> None:
        at = now - timedelta(days=days_ago)
        async with db.transaction() as tx:
            job, _ = await job_store.enqueue(
                tx,
                tenant_id=TENANT,
                kind=kind,
                key=key,
                payload={},
                due_at=at,
                max_attempts=1,
                now=at,
            )
            await job_store.claim(tx, owner="w", kinds={kind}, now=at, lease_until=at, limit=1)
            if succeed:
                assert await job_store.finish(tx, job_id=job.id, owner="w", result={}, now=at)
            else:
                assert await job_store.fail(
                    tx, job_id=job.id, owner="w", error="x", now=at, retry_at=None
                )

    await finished("old", 10, succeed=True)
    await finished("recent", 1, succeed=True)
    await finished("old-failed", 10, succeed=False)

    jobs = JobService(db, max_attempts=3)
    registry = Registry([jobs.purge_job(keep=timedelta(days=7), keep_kinds=(ERASE_USER,))])
    scheduler = Scheduler(
        db, "s", registry.schedules, lease_seconds=30, tick_seconds=1, max_attempts=3
    )
    await scheduler.tick(now)
    job_id = await make_runner(db, registry.handlers).run_once()
    assert job_id is not None
    purge = await get(db, job_id, SYSTEM_TENANT)
    assert (purge.kind, purge.state) == (PURGE_FINISHED_JOBS, "succeeded")
    assert purge.result is not None
    assert purge.result["deleted"] == 1
    async with db.read() as tx:
        left = set(await tx.scalars(sa.select(Job.key).where(Job.kind == kind)))
    assert left == {"recent", "old-failed"}
