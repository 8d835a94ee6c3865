"""Queries on durable jobs and on the leader leases of periodic schedules (docs/jobs.md).

A job is claimed under a lease; every write of a running job's outcome is guarded by
`lease_owner`, so a runner that lost its lease (it stalled, another took the job over)
cannot overwrite what the new owner records.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.stores.models import Job, LeaderLease
from app.stores.sessions import _insert


async def enqueue(
    tx: AsyncSession,
    *,
    tenant_id: str,
    kind: str,
    key: str,
    payload: dict[str, Any],
    due_at: datetime,
    max_attempts: int,
    now: datetime,
) -> tuple[Job, bool]:
    """The job of this (tenant, kind, key), created queued if missing: (job, created).

    INSERT .. ON CONFLICT DO NOTHING, then a read of whichever row holds the key: enqueueing
    twice, from two processes at once even, yields one job.
    """
    for _ in range(3):
        stmt = (
            _insert(tx, Job)
            .values(
                id=uuid.uuid4(),
                tenant_id=tenant_id,
                kind=kind,
                key=key,
                state="queued",
                payload=payload,
                due_at=due_at,
                attempts=0,
                max_attempts=max_attempts,
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_nothing(index_elements=["tenant_id", "kind", "key"])
            .returning(Job.id)
        )
        created = (await tx.execute(stmt)).first() is not None
        job = (
            await tx.execute(
                sa.select(Job).where(Job.tenant_id == tenant_id, Job.kind == kind, Job.key == key)
            )
        ).scalar_one_or_none()
        if job is not None:
            return job, created
        # The holder of the key was purged between our insert and our read: try again.
    raise RuntimeError(f"job {kind}/{key} kept vanishing while being enqueued")


async def find(tx: AsyncSession, *, tenant_id: str, kind: str, key: str) -> Job | None:
    """The job of this (tenant, kind, key), in whatever state, if there is one."""
    stmt = sa.select(Job).where(Job.tenant_id == tenant_id, Job.kind == kind, Job.key == key)
    return (await tx.execute(stmt)).scalar_one_or_none()


async def get(tx: AsyncSession, tenant_id: str, job_id: uuid.UUID) -> Job | None:
    result = await tx.execute(sa.select(Job).where(Job.id == job_id, Job.tenant_id == tenant_id))
    return result.scalar_one_or_none()


def _due(kinds: Collection[str], now: datetime) -> sa.ColumnElement[bool]:
    return sa.and_(
        Job.kind.in_(sorted(kinds)),
        sa.or_(
            sa.and_(Job.state == "queued", Job.due_at <= now),
            sa.and_(Job.state == "running", Job.lease_expires_at < now),
        ),
    )


async def any_due(tx: AsyncSession, *, kinds: Collection[str], now: datetime) -> bool:
    """Whether `claim` would find work: a read, so an idle runner's poll takes no lock."""
    result = await tx.execute(sa.select(sa.literal(1)).where(_due(kinds, now)).limit(1))
    return result.first() is not None


async def claim(
    tx: AsyncSession,
    *,
    owner: str,
    kinds: Collection[str],
    now: datetime,
    lease_until: datetime,
    limit: int,
) -> list[Job]:
    """Lease up to `limit` due jobs of `kinds`, counting an attempt on each.

    Due means queued with `due_at` passed, or running under an expired lease (its runner
    died or stalled). A job whose expired lease was its last attempt is failed instead of
    run again: a job that kills its runner every time must not loop forever.

    SKIP LOCKED lets N runners claim side by side without waiting on one another; SQLite
    ignores the clause and needs none, its writers being serialised (app/stores/db.py).
    """
    due = (
        sa.select(Job.id, Job.state, Job.attempts, Job.max_attempts)
        .where(_due(kinds, now))
        .order_by(Job.due_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    rows = (await tx.execute(due)).all()
    spent = [r.id for r in rows if r.state == "running" and r.attempts >= r.max_attempts]
    if spent:
        await tx.execute(
            sa.update(Job)
            .where(Job.id.in_(spent))
            .values(
                state="failed",
                last_error="lease expired on the last attempt: its runner died or stalled",
                lease_owner=None,
                lease_expires_at=None,
                updated_at=now,
                finished_at=now,
            )
        )
    ids = [r.id for r in rows if r.id not in spent]
    if not ids:
        return []
    claimed = await tx.scalars(
        sa.update(Job)
        .where(Job.id.in_(ids))
        .values(
            state="running",
            attempts=Job.attempts + 1,
            lease_owner=owner,
            lease_expires_at=lease_until,
            updated_at=now,
        )
        .returning(Job)
    )
    return sorted(claimed, key=lambda job: job.due_at)


async def renew(
    tx: AsyncSession, *, job_id: uuid.UUID, owner: str, now: datetime, lease_until: datetime
) -> bool:
    """Extend a running job's lease; False when `owner` no longer holds it."""
    result = await tx.execute(
        sa.update(Job)
        .where(Job.id == job_id, Job.lease_owner == owner, Job.state == "running")
        .values(lease_expires_at=lease_until, updated_at=now)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def finish(
    tx: AsyncSession, *, job_id: uuid.UUID, owner: str, result: dict[str, Any], now: datetime
) -> bool:
    """Record success, if `owner` still holds the lease; False (and nothing written) if not."""
    done = await tx.execute(
        sa.update(Job)
        .where(Job.id == job_id, Job.lease_owner == owner, Job.state == "running")
        .values(
            state="succeeded",
            result=result,
            lease_owner=None,
            lease_expires_at=None,
            updated_at=now,
            finished_at=now,
        )
    )
    return bool(done.rowcount)  # type: ignore[attr-defined]


async def fail(
    tx: AsyncSession,
    *,
    job_id: uuid.UUID,
    owner: str,
    error: str,
    now: datetime,
    retry_at: datetime | None,
) -> bool:
    """Record a failed attempt, if `owner` still holds the lease: queued again at
    `retry_at`, or failed for good when `retry_at` is None."""
    values: dict[str, Any] = (
        {"state": "failed", "finished_at": now}
        if retry_at is None
        else {"state": "queued", "due_at": retry_at}
    )
    done = await tx.execute(
        sa.update(Job)
        .where(Job.id == job_id, Job.lease_owner == owner, Job.state == "running")
        .values(last_error=error, lease_owner=None, lease_expires_at=None, updated_at=now, **values)
    )
    return bool(done.rowcount)  # type: ignore[attr-defined]


async def rerun(
    tx: AsyncSession, *, tenant_id: str, job_id: uuid.UUID, now: datetime
) -> Job | None:
    """Queue a failed job again with a fresh set of attempts; None if it is not failed."""
    result = await tx.scalars(
        sa.update(Job)
        .where(Job.id == job_id, Job.tenant_id == tenant_id, Job.state == "failed")
        .values(state="queued", attempts=0, due_at=now, updated_at=now, finished_at=None)
        .returning(Job)
    )
    return result.one_or_none()


async def requeue(tx: AsyncSession, *, job_id: uuid.UUID, now: datetime) -> bool:
    """Queue a finished job (succeeded or failed) again, due now, with a fresh set of
    attempts: a keyed job whose work has become due once more (a summary whose inputs
    changed). A queued or running job is left as it is; False then."""
    result = await tx.execute(
        sa.update(Job)
        .where(Job.id == job_id, Job.state.in_(("succeeded", "failed")))
        .values(
            state="queued",
            attempts=0,
            due_at=now,
            last_error=None,
            result=None,
            updated_at=now,
            finished_at=None,
        )
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def purge_succeeded(
    tx: AsyncSession, *, finished_before: datetime, keep_kinds: Collection[str] = ()
) -> int:
    """Delete succeeded jobs finished before the cutoff, except those of `keep_kinds`
    (records kept on purpose); failed ones stay, to be seen."""
    stmt = sa.delete(Job).where(Job.state == "succeeded", Job.finished_at < finished_before)
    if keep_kinds:
        stmt = stmt.where(Job.kind.not_in(list(keep_kinds)))
    result = await tx.execute(stmt)
    return int(result.rowcount)  # type: ignore[attr-defined]


async def acquire_leader(
    tx: AsyncSession, *, name: str, owner: str, now: datetime, until: datetime
) -> bool:
    """Take or renew the leader lease `name`: True if `owner` holds it until `until`.

    One statement: an upsert that overwrites the row only when it is ours or expired, so
    two contenders at once can never both win (PostgreSQL locks the conflicting row).
    """
    stmt = _insert(tx, LeaderLease).values(name=name, owner=owner, expires_at=until)
    stmt = stmt.on_conflict_do_update(
        index_elements=["name"],
        set_={"owner": stmt.excluded.owner, "expires_at": stmt.excluded.expires_at},
        where=sa.or_(LeaderLease.owner == owner, LeaderLease.expires_at < now),
    ).returning(LeaderLease.name)
    return (await tx.execute(stmt)).first() is not None


async def release_leader(tx: AsyncSession, *, name: str, owner: str) -> None:
    await tx.execute(
        sa.delete(LeaderLease).where(LeaderLease.name == name, LeaderLease.owner == owner)
    )
